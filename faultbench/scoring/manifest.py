"""Did the injected fault show at all? A test against the healthy runs' spread.

A diagnoser cannot be blamed for missing a fault that left no trace. For each
faulty run we compare a handful of trace signals with the healthy runs of the
same task (other seeds): a signal *deviates* when it falls outside the
healthy runs' prediction interval (Student t, Bonferroni-corrected over the
signals). A run whose signals all stay inside is reported as "no visible
effect" rather than as a diagnoser's miss. This is mutation testing's
"killed or equivalent mutant" question, asked of training faults.

The loss signals are read against the run's loss reference
(:attr:`~faultbench.training.trace.RunConfig.start_loss`: the loss an untrained
model starts near, ln C for C classes, ln 2 for a logits loss, the targets'
variance for a squared error), so they mean the same on every kind of task; a
run without one (a trace of a kind nothing knows) leaves them untested.
"""

from __future__ import annotations

import itertools
import math
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

from faultbench.training.trace import RunConfig, Trace

ALPHA = 0.01  # family-wise rate of calling a run visible when it is not
RELATIVE_FLOOR = 0.01  # healthy spread is never taken below 1% of the healthy mean
EFFECT_CAP = 1000.0  # effects beyond 1000 healthy sds (or not finite) are all "off the scale"
EFFECT_FLOOR = 0.01  # an effect's unit is never below 0.01: a point of a share, 1% of a ratio


def _reference(c: RunConfig) -> float:
    """The loss the run's model starts near; NaN where there is none to divide by."""
    start = c.start_loss
    return start if math.isfinite(start) and start > 0 else math.nan


def _first_loss(t: Trace, c: RunConfig) -> float:
    return float(t.loss[0]) / _reference(c)


def _final_loss(t: Trace, c: RunConfig) -> float:
    tail = t.loss[-20:]
    tail = tail[~np.isnan(tail)]  # a run whose loss went NaN at the end has none: NaN, silently
    return float(tail.mean()) / _reference(c) if len(tail) else math.nan


def _val_acc(t: Trace, c: RunConfig) -> float:
    return float(t.val_acc[-1]) if len(t.val_acc) else math.nan


def _gap(t: Trace, c: RunConfig) -> float:
    return float(t.train_acc[-1] - t.val_acc[-1]) if len(t.val_acc) else math.nan


def _wait(t: Trace, c: RunConfig) -> float:
    return t.wait_share


def _grad_growth(t: Trace, c: RunConfig) -> float:
    g = np.concatenate([v[None] for v in t.grad_norm.values()]).sum(axis=0)
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a run that is NaN from the start
        late, early = np.nanmean(g[-50:]), np.nanmean(g[:10])
        # An infinite early gradient (a run that blew up, then stalled) gives -inf.
        return float(np.log10(np.fmax(late, 1e-12) / np.fmax(early, 1e-12)))


def _inactive(t: Trace, c: RunConfig) -> float:
    return float(t.inactive_share.mean()) if len(t.inactive_share) else 0.0


def _no_grad(t: Trace, c: RunConfig) -> float:
    return max(t.no_grad_weights[k] / max(1, t.weight_count[k]) for k in t.no_grad_weights)


def _least_change(t: Trace, c: RunConfig) -> float:
    return math.log10(max(min(t.weight_change.values()), 1e-12))


def _spikes(t: Trace, c: RunConfig) -> float:
    reference = _reference(c)
    if math.isnan(reference):
        return math.nan
    late = np.nan_to_num(t.loss[len(t.loss) // 6 :], nan=np.inf)
    return float((late > reference).mean())


def _mean(values: np.ndarray) -> float:
    """The mean of the finite values; NaN when there is none (a classifier's run)."""
    finite = values[np.isfinite(values)]
    return float(finite.mean()) if len(finite) else math.nan


def _counted(t: Trace, c: RunConfig) -> float:
    return _mean(t.counted_share)


def _padding_counted(t: Trace, c: RunConfig) -> float:
    return _mean(t.padding_counted_share)


def _future_attention(t: Trace, c: RunConfig) -> float:
    means = [_mean(v) for v in t.attention_future.values()]
    return max((m for m in means if math.isfinite(m)), default=math.nan)


def _val_token_acc(t: Trace, c: RunConfig) -> float:
    return float(t.val_token_acc[-1]) if len(t.val_token_acc) else math.nan


def _sequence(t: Trace) -> bool:
    return bool(np.isfinite(t.counted_share).any())


def _lr_restarts(t: Trace, c: RunConfig) -> float:
    # Read on sequence runs only: the classifier tasks' levels were measured without it
    # (NaN: not tested).
    if not _sequence(t):
        return math.nan
    lr = t.lr[np.isfinite(t.lr)]
    rise, count, low, fell = 0.1 * float(lr.max(initial=0.0)), 0, math.inf, False
    for before, now in itertools.pairwise(lr):  # rises of a tenth of the peak after a fall
        if now < before:
            fell, low = True, min(low, float(now))
        elif fell and now - low >= rise:
            count, fell, low = count + 1, False, math.inf
    return float(count)


#: Signal name -> function of (trace, config); each is relative to the run.
SIGNALS: dict[str, Callable[[Trace, RunConfig], float]] = {
    "first_loss_over_reference": _first_loss,  # the reference: ln C for C classes
    "final_loss_over_reference": _final_loss,
    "val_acc": _val_acc,
    "train_val_gap": _gap,
    "wait_share": _wait,
    "log_grad_growth": _grad_growth,
    "inactive_share": _inactive,
    "no_grad_share": _no_grad,
    "log_least_weight_change": _least_change,
    "late_loss_above_reference": _spikes,
    # A sequence model's (NaN for a classifier's run, and then not tested):
    "counted_share": _counted,
    "padding_counted_share": _padding_counted,
    "future_attention": _future_attention,
    "val_token_acc": _val_token_acc,
    "lr_restarts": _lr_restarts,
}


@dataclass(frozen=True)
class Manifestation:
    """Whether one faulty run's trace differs from healthy beyond seed noise."""

    visible: bool | None  # None when there are too few healthy runs to test
    deviations: tuple[str, ...]  # the signals outside the healthy interval
    healthy_runs: int  # how many healthy runs the interval came from


def signals(trace: Trace, config: RunConfig) -> dict[str, float]:
    """Every signal of one run."""
    return {name: fn(trace, config) for name, fn in SIGNALS.items()}


def manifestation(
    trace: Trace, config: RunConfig, healthy: Sequence[tuple[Trace, RunConfig]]
) -> Manifestation:
    """Test one run's signals against the healthy runs' prediction intervals."""
    n = len(healthy)
    if n < 2:
        return Manifestation(None, (), n)
    mean, sd = _healthy_spread(healthy)
    # A signal the healthy runs lack (a sequence model's, on a classifier's task) is not
    # tested, and not counted in the correction.
    measured = np.isfinite(mean)
    quantile = stats.t.ppf(1 - ALPHA / (2 * max(1, int(measured.sum()))), df=n - 1)
    half_width = quantile * sd * math.sqrt(1 + 1 / n)
    values = np.array(list(signals(trace, config).values()), dtype=float)
    outside = measured & ~(np.abs(np.nan_to_num(values, nan=np.inf) - mean) <= half_width)
    names = tuple(name for name, out in zip(SIGNALS, outside) if out)
    return Manifestation(bool(names), names, n)


def _healthy_spread(healthy: Sequence[tuple[Trace, RunConfig]]) -> tuple[np.ndarray, np.ndarray]:
    """Per signal: the healthy runs' mean and sd (never below 1% of the mean)."""
    base = np.array([list(signals(t, c).values()) for t, c in healthy], dtype=float)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a signal no healthy run has: NaN
        mean, sd = np.nanmean(base, axis=0), np.nanstd(base, axis=0, ddof=1)
    return mean, np.maximum(np.nan_to_num(sd), RELATIVE_FLOOR * np.abs(mean) + 1e-9)


def effect(trace: Trace, config: RunConfig, healthy: Sequence[tuple[Trace, RunConfig]]) -> float:
    """How far a run moved its most-moved signal: the largest |value - mean| / sd.

    In units of the healthy runs' spread, so the same number means the same
    thing on every task; a signal that is not finite (a diverged run) counts
    as :data:`EFFECT_CAP`, as does anything beyond it. The unit is never below
    :data:`EFFECT_FLOOR`: a share that is exactly 0 in every healthy run (dead
    units, weights without gradient) would otherwise make any change at all
    infinitely far, and every severity of such a fault equally severe.

    Raises:
        ValueError: fewer than two healthy runs (no spread to measure against).
    """
    if len(healthy) < 2:
        raise ValueError(f"an effect needs at least 2 healthy runs; got {len(healthy)}")
    mean, sd = _healthy_spread(healthy)
    sd = np.maximum(sd, EFFECT_FLOOR)
    values = np.array(list(signals(trace, config).values()), dtype=float)
    measured = np.isfinite(mean)  # a signal the healthy runs lack says nothing
    z = np.where(np.isfinite(values), np.abs(values - mean) / sd, EFFECT_CAP)[measured]
    return float(min(EFFECT_CAP, np.max(z, initial=0.0)))
