"""TheDeepChecker's checks as pure functions of arrays, with its published settings.

The values are those of ``deep_checker/config/settings.yaml`` in the repository
``thedeepchecker/thedeepchecker``; the checks follow ``checkers.py`` (pre- and
post-checks) and ``hooks.py`` (the overfit phase), written anew. Each check returns the
alerts it raises as ``(message key, numbers)``; :mod:`~faultbench.diagnosers.thedeepchecker`
runs the phases that feed them and documents the whole port.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy import stats

# -- settings.yaml ----------------------------------------------------------------------

TOLERANCE = 1e-2  # utils.almost_equal's default absolute tolerance
NORMALIZED_MINS = (0.0, -1.0)  # PreCheck.Data.normalized_data_mins
NORMALIZED_MAXS = (1.0,)  # PreCheck.Data.normalized_data_maxs
LABELS_BALANCE_MIN = 0.5  # PreCheck.Data.labels_perp_min_thresh
F_CRITICAL = 2.70554  # metrics.pure_f_test at f_test_alpha = 0.1
ZERO_VARIANCE = 1e-8  # _pre_check_weights: almost_equal(var, 0, rtol=1e-8)
INIT_LOSS_SAMPLE = 128  # PreCheck.Initial_Loss.sample_size
SIZE_GROWTH_RATE, SIZE_GROWTH_ITERS = 2, 5  # data_size_growth_rate, _iters
INIT_LOSS_DEV = 1.0  # dev_ratio: |loss - ln C| >= dev_ratio * ln C
SINGLE_BATCH = 16  # Proper_Fitting.single_batch_size
SINGLE_BATCH_ITERS = 1000  # Proper_Fitting.total_iters
MISLABELED_MAX = 0.05  # mislabeled_rate_max_thresh: 1 - best accuracy
ABS_LOSS_MIN = 1e-8  # abs_loss_min_thresh
LOSS_MIN = 1e-5  # loss_min_thresh
SMOOTHNESS_MAX = 0.95  # smoothness_max_thresh
OVERFIT_BATCH, OVERFIT_ITERS = 50, 200  # run_full_checks' overfit_batch, overfit_iters
START, PERIOD = 10, 10  # OverfitCheck.start, .period
BUFFER_SCALE = 10  # DeepChecker(buffer_scale=10): batches of activations kept
OUTPUT_PATIENCE = 5  # OverfitCheck.Activation.Output.patience
DEAD_ACT_MIN, DEAD_PERCENTILE, DEAD_RATIO = 1e-5, 95, 0.5  # Activation.Dead
SAT_BINS, SAT_RANGE, SAT_RO_MAX, SAT_RATIO = 50, (0.0, 1.0), 0.85, 0.5  # .Saturation
ACT_STD_RANGE = (0.5, 2.0)  # Activation.Distribution.std_acts_min/max_thresh
DEAD_WEIGHT, DEAD_WEIGHT_RATIO = 1e-5, 0.95  # Weight.Dead
NEGATIVE_RATIO = 0.95  # Weight.Negative.ratio_max_thresh
WINDOW = 5  # Weight/Bias.Diverging, Gradient.*, Loss.NonDecreasing/Diverging .window_size
DIVERGING_MAV, DIVERGING_RATE = 1e8, 2.0  # Weight.Diverging mav_max_thresh, inc_rate_max_thresh
VANISHING_MAV, VANISHING_RATE = 1e-6, 0.5  # Gradient.Vanishing
EXPLODING_MAV, EXPLODING_RATE = 1e6, 2.0  # Gradient.Exploding
UPDATES_HIGH, UPDATES_LOW = -1.0, -4.0  # Gradient.Unstable_Learning (log10 update ratio)
LOSS_DECREASE = 0.05  # Loss.NonDecreasing.decr_percentage
LOSS_DIVERGING = 2.0  # Loss.Diverging.incr_abs_rate_max_thresh
FLUCTUATION_WINDOW, SMOOTHNESS_MIN = 50, 0.5  # Loss.Fluctuating
CORRELATION_MIN = 0.5  # Loss.Representativeness.abs_corr_min_thresh
LABELS_BATCH, LABELS_WARMUP, LABELS_EPOCHS = 32, 5, 50  # PostCheck.Corrupted_Labels
LABELS_PATIENCE, LABELS_IMPROVEMENT = 5, 0.1  # .patience, .perf_improv_ratio_min_thresh

Alert = tuple[str, dict[str, Any]]  # (message key, the numbers behind it)


def almost_equal(a: float, b: float, tol: float = TOLERANCE) -> bool:
    """``utils.almost_equal``: an absolute tolerance despite its argument's name."""
    return bool(abs(a - b) <= tol)


def f_test(values: np.ndarray, ref_std: float) -> bool:
    """``metrics.pure_f_test``: the variance ratio (larger over smaller) within F_CRITICAL."""
    var, ref = float(np.std(values)) ** 2, ref_std**2
    ratio = var / ref if var > ref else ref / var if var > 0 else math.inf
    return ratio <= F_CRITICAL


def smoothness(data: np.ndarray) -> float:
    """``metrics.smoothness``: the share of points where the curve does not turn."""
    if len(data) < 1:
        return 1.0
    with np.errstate(divide="ignore", invalid="ignore"):
        rising = data[1:] / data[:-1] > 1.0
    turns = np.count_nonzero(np.diff(rising))
    return (len(data) - turns) / len(data)


# -- pre-checks -------------------------------------------------------------------------


def check_features(X: np.ndarray) -> list[Alert]:
    """Homogeneous features: constant, or neither in [0|-1, 1] nor standardized."""
    mean, std, top, bottom = float(X.mean()), float(X.std()), float(X.max()), float(X.min())
    numbers = {"mean": mean, "std": std, "max": top, "min": bottom}
    if std == 0.0:
        return [("features_constant", numbers)]
    if any(almost_equal(top, m) for m in NORMALIZED_MAXS) and any(
        almost_equal(bottom, m) for m in NORMALIZED_MINS
    ):
        return []
    if not (almost_equal(std, 1.0) and almost_equal(mean, 0.0)):
        return [("features_unnormalized", numbers)]
    return []


def label_balance(y: np.ndarray, n_classes: int) -> tuple[float, np.ndarray]:
    """The labels' normalized perplexity (1: uniform) and their frequencies."""
    probas = np.bincount(y.astype(np.int64), minlength=n_classes)[:n_classes] / max(1, len(y))
    perplexity = float(np.exp(stats.entropy(probas)))
    return (perplexity - 1) / (n_classes - 1), probas


def check_targets(y: np.ndarray, n_classes: int) -> list[Alert]:
    """Classification labels far from balanced."""
    balance, _ = label_balance(y, n_classes)
    return [("unbalanced_labels", {"balance": balance})] if balance < LABELS_BALANCE_MIN else []


def fans(shape: Sequence[int]) -> tuple[int, int]:
    """Fan-in and fan-out of a PyTorch weight (out, in, *kernel)."""
    receptive = int(np.prod(shape[2:])) if len(shape) > 2 else 1
    return int(shape[1]) * receptive, int(shape[0]) * receptive


def check_initial_weights(weights: dict[str, np.ndarray], activation: str) -> list[Alert]:
    """Per weight: no symmetry breaking, or a scale none of He, Glorot, LeCun passes."""
    alerts: list[Alert] = []
    for name, w in weights.items():
        if w.ndim < 2:
            continue
        if almost_equal(float(np.var(w)), 0.0, ZERO_VARIANCE):
            alerts.append(("poor_init", {"weight": name}))
            continue
        fan_in, fan_out = fans(w.shape)
        lecun = f_test(w, math.sqrt(1.0 / fan_in))
        he = f_test(w, math.sqrt(2.0 / fan_in))
        glorot = f_test(w, math.sqrt(2.0 / (fan_in + fan_out)))
        numbers = {"weight": name, "std": float(np.std(w)), "fan_in": fan_in}
        if activation == "relu" and not he:
            alerts.append(("need_he", numbers))
        elif activation == "tanh" and not glorot:
            alerts.append(("need_glorot", numbers))
        elif activation == "sigmoid" and not lecun:
            alerts.append(("need_lecun", numbers))
        elif not (lecun or he or glorot):
            alerts.append(("need_init_well", numbers))
    return alerts


def check_initial_biases(
    biases: dict[str, np.ndarray], y: np.ndarray, n_classes: int
) -> list[Alert]:
    """No biases; for unbalanced labels a last bias that ignores them; else non-zero biases."""
    if not biases:
        return [("need_bias", {})]
    zero = [float(np.sum(b)) == 0.0 for b in biases.values()]
    balance, probas = label_balance(y, n_classes)
    if balance < LABELS_BALANCE_MIN:
        if zero[-1]:
            return [("last_bias", {"balance": balance})]
        last = list(biases.values())[-1]
        if not np.array_equal(np.argsort(last), np.argsort(probas)):
            return [("ineff_bias_cls", {"balance": balance})]
        return []
    if not all(zero):
        return [("zero_bias", {"nonzero": [n for n, z in zip(biases, zero) if not z]})]
    return []


def check_loss_reduction(losses: Sequence[float]) -> list[Alert]:
    """Losses of a batch repeated 2, 4, 8 times that double each time: a sum, not a mean."""
    rates = [round(losses[i + 1] / losses[i]) for i in range(len(losses) - 1) if losses[i]]
    summed = len(rates) == len(losses) - 1 and all(r == SIZE_GROWTH_RATE for r in rates)
    return [("poor_reduction_loss", {"rates": rates})] if summed else []


def check_initial_loss(loss: float, n_classes: int) -> list[Alert]:
    """The untrained model's loss off ln C by at least dev_ratio * ln C."""
    expected = math.log(n_classes)
    error = abs(loss - expected)
    if not error < INIT_LOSS_DEV * expected:  # a NaN loss is off too
        return [("poor_init_loss", {"loss": loss, "relative_error": error / expected})]
    return []


def check_single_batch(losses: np.ndarray, accs: np.ndarray) -> list[Alert]:
    """The single-batch fit: it diverged, it could not fit, or its loss went to zero."""
    if len(losses) and not np.isfinite(losses[-1]):
        key = "nan_loss" if np.isnan(losses[-1]) else "inf_loss"
        return [(key, {"iteration": len(losses) - 1}), ("underfitting_single_batch", {})]
    alerts: list[Alert] = []
    best = float(np.nanmax(accs, initial=0.0))
    if 1.0 - best > MISLABELED_MAX:
        alerts.append(("underfitting_single_batch", {"best_acc": best}))
    lowest = float(np.min(losses)) if len(losses) else math.nan
    smooth = smoothness(losses)
    if lowest <= ABS_LOSS_MIN or (lowest <= LOSS_MIN and smooth > SMOOTHNESS_MAX):
        alerts.append(("zero_loss", {"min_loss": lowest, "smoothness": smooth}))
    return alerts


# -- the overfit phase ------------------------------------------------------------------


def as_rows(acts: np.ndarray) -> np.ndarray:
    """``utils.transform_2d(keep='last')`` for PyTorch: one column per neuron or channel."""
    if acts.ndim <= 2:
        return acts.reshape(len(acts), -1)
    return np.moveaxis(acts, 1, -1).reshape(-1, acts.shape[1])


def numerical(prefix: str, values: np.ndarray, where: str) -> list[Alert]:
    """An infinite or NaN entry (``*_inf`` before ``*_nan``, as published)."""
    if np.isinf(values).any():
        return [(f"{prefix}_inf", {"where": where})]
    if np.isnan(values).any():
        return [(f"{prefix}_nan", {"where": where})]
    return []


def check_dead_neurons(buffer: np.ndarray, where: str) -> list[Alert]:
    """More than half the neurons with their 95th-percentile |activation| below 1e-5."""
    major = np.percentile(np.abs(as_rows(buffer)), DEAD_PERCENTILE, axis=0)
    ratio = float(np.count_nonzero(major < DEAD_ACT_MIN) / major.size)
    return [("act_dead", {"where": where, "dead_ratio": ratio})] if ratio > DEAD_RATIO else []


def ro_b(values: np.ndarray) -> float:
    """``metrics.compute_ro_B``: the mean distance to the range's centre, bin by bin."""
    low, high = SAT_RANGE
    bins = np.arange(low, high, (high - low) / SAT_BINS)
    which = np.digitize(values, bins)
    total = 0.0
    for b in np.unique(which):
        members = values[which == b]
        total += abs(2 * (float(members.mean()) - low) / (high - low) - 1) * len(members)
    return total / len(values)


def check_saturated_neurons(buffer: np.ndarray, where: str) -> list[Alert]:
    """More than half the neurons with a saturation measure above 0.85 (sigmoid, tanh)."""
    ros = np.apply_along_axis(ro_b, 0, as_rows(buffer))
    ratio = float(np.count_nonzero(ros > SAT_RO_MAX) / ros.size)
    return [("act_sat", {"where": where, "saturated_ratio": ratio})] if ratio > SAT_RATIO else []


def check_activation_spread(buffer: np.ndarray, where: str) -> list[Alert]:
    """Activations' std outside [0.5, 2], by more than an F-test allows."""
    std = float(np.std(as_rows(buffer)))
    low, high = ACT_STD_RANGE
    if low <= std <= high or f_test(buffer, low if std < low else high):
        return []
    return [("act_unstable", {"where": where, "std": std})]


@dataclass
class OutputState:
    """What the output check remembers across iterations."""

    varied: np.ndarray  # per output: whether it ever varied over a batch
    patience: int = OUTPUT_PATIENCE  # checks left before "constant outputs"


def check_outputs(probs: np.ndarray, state: OutputState, n_classes: int) -> list[Alert]:
    """The post-activation outputs: finite, varying, and valid probabilities."""
    if np.isinf(probs).any():
        return [("out_inf", {})]
    if np.isnan(probs).any():
        return [("out_nan", {})]
    alerts: list[Alert] = []
    if not state.varied.all():
        state.patience -= 1
        if state.patience <= 0:
            alerts.append(("out_cons", {}))
    else:
        state.patience = OUTPUT_PATIENCE
    sums = probs.sum(axis=1)
    valid = (
        bool(((sums > 0.95) & (sums < 1.05)).all())
        and bool((probs >= 0).all())
        and probs.shape[1] == n_classes
    )
    return [*alerts, ("output_invalid", {})] if not valid else alerts


def check_weight(w: np.ndarray, history: Sequence[float], where: str) -> list[Alert]:
    """A weight matrix: mostly negative, mostly dead, or diverging."""
    alerts: list[Alert] = []
    negative = float(np.count_nonzero(w < 0) / w.size)
    if negative > NEGATIVE_RATIO:
        alerts.append(("w_sign", {"where": where, "negative_ratio": negative}))
    dead = float(np.count_nonzero(np.abs(w) < DEAD_WEIGHT) / w.size)
    if dead > DEAD_WEIGHT_RATIO:
        alerts.append(("w_dead", {"where": where, "dead_ratio": dead}))
    return alerts + check_divergence("w", history, where)


def _rates(history: Sequence[float]) -> np.ndarray:
    values = np.asarray(history, dtype=np.float64)[-WINDOW:]
    with np.errstate(divide="ignore", invalid="ignore"):
        return values[1:] / values[:-1]


def check_divergence(prefix: str, history: Sequence[float], where: str) -> list[Alert]:
    """Mean |value| above 1e8, or growing at least 2x for the last window."""
    if history[-1] > DIVERGING_MAV:
        return [(f"{prefix}_div_1", {"where": where, "mean_abs": history[-1]})]
    if len(history) >= WINDOW and bool((_rates(history) >= DIVERGING_RATE).all()):
        return [(f"{prefix}_div_2", {"where": where})]
    return []


def check_gradient(history: Sequence[float], where: str) -> list[Alert]:
    """Mean |gradient| vanishing (below 1e-6 or halving) or exploding (above 1e6 or doubling)."""
    alerts: list[Alert] = []
    if history[-1] < VANISHING_MAV:
        alerts.append(("gw_van_1", {"where": where, "mean_abs": history[-1]}))
    elif len(history) >= WINDOW and bool((_rates(history) <= VANISHING_RATE).all()):
        alerts.append(("gw_van_2", {"where": where}))
    if history[-1] > EXPLODING_MAV:
        alerts.append(("gw_exp_1", {"where": where, "mean_abs": history[-1]}))
    elif len(history) >= WINDOW and bool((_rates(history) >= EXPLODING_RATE).all()):
        alerts.append(("gw_exp_2", {"where": where}))
    return alerts


def update_magnitude(before: np.ndarray, after: np.ndarray) -> float | None:
    """log10 of mean |update| / mean |weight before| (0 for no update; None: zero weights)."""
    divider = float(np.mean(np.abs(before)))
    if divider == 0:
        return None
    ratio = float(np.mean(np.abs(after - before))) / divider
    return math.log10(ratio) if ratio > 0 else 0.0


def check_updates(magnitudes: Sequence[float], where: str) -> list[Alert]:
    """The window's mean log10 update ratio: 0 (untrained), above -1, or below -4."""
    if not magnitudes:
        return []
    mean = float(np.mean(magnitudes))
    if mean == 0:
        return [("w_untrained", {"where": where})]
    if mean > UPDATES_HIGH:
        return [("w_fast", {"where": where, "log_update_ratio": mean})]
    if mean < UPDATES_LOW:
        return [("w_slow", {"where": where, "log_update_ratio": mean})]
    return []


@dataclass
class LossState:
    """The loss hook's memory: one mean per period."""

    losses: list[float] = field(default_factory=list)  # mean loss of each period
    perfs: list[float] = field(default_factory=list)  # mean accuracy of each period
    lowest: float = math.inf  # the lowest period mean so far


def check_loss_curve(state: LossState) -> list[Alert]:
    """The periods' losses: stagnating, diverging from their minimum, or fluctuating."""
    losses, alerts = state.losses, list[Alert]()
    n = len(losses)
    if n >= WINDOW:
        last = np.asarray(losses[-WINDOW:], dtype=np.float64)
        with np.errstate(divide="ignore", invalid="ignore"):
            drops = (last[:-1] - last[1:]) / last[:-1]
            relative = last / state.lowest
            rates = relative[1:] / relative[:-1]
        if bool((drops < LOSS_DECREASE).all()):
            alerts.append(("stagnated_loss", {"drops": drops.tolist()}))
        if bool((rates >= LOSS_DIVERGING).all()):
            alerts.append(("div_loss", {"rates": rates.tolist()}))
    smooth = smoothness(np.asarray(losses[-FLUCTUATION_WINDOW:], dtype=np.float64))
    if smooth < SMOOTHNESS_MIN:
        alerts.append(("fluctuated_loss", {"smoothness": smooth}))
    if n > 2 and len(state.perfs) > 2:
        with np.errstate(divide="ignore", invalid="ignore"):
            corr = float(np.abs(np.corrcoef(losses, state.perfs))[1, 0])
        if corr < CORRELATION_MIN:
            alerts.append(("non_representative_loss", {"correlation": corr}))
    return alerts


# -- post-check ------------------------------------------------------------------------


def check_corrupted_labels(first_batch_losses: Sequence[float]) -> list[Alert]:
    """The first batch's loss barely varies from epoch to epoch after the warm-up."""
    rest = np.asarray(first_batch_losses[LABELS_WARMUP:], dtype=np.float64)
    variance = float(np.var(rest)) if len(rest) else math.nan
    return [("corrupted_data", {"variance": variance})] if almost_equal(variance, 0.0) else []
