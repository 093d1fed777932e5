"""What a run leaves behind for a diagnoser: its trace and observable configuration."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import MISSING, dataclass, field, fields, replace
from typing import Any

import numpy as np

#: The shares of a run's steps it is also read at (:meth:`Trace.prefix`), as a run stopped
#: there would have it: how early a diagnoser knows.
PREFIXES = (0.1, 0.25, 0.5)
#: The summaries a Monitor computes at the end of a run (from the weights at the start and a
#: flag per weight), which a prefix needs as they stood at its last step.
END_OF_RUN = ("no_grad_weights", "weight_change", "no_grad_sampled")


def prefix_step(steps: int, fraction: float) -> int:
    """The last step of the share ``fraction`` of a run of ``steps`` steps (at least 1)."""
    return max(1, math.floor(fraction * steps + 1e-9))  # 0.1 * 70 is 7.000000000000001


def prefix_steps(steps: int, fractions: Sequence[float] = PREFIXES) -> tuple[int, ...]:
    """The steps a run of ``steps`` steps is cut at, one per fraction (those before its end)."""
    return tuple(sorted({prefix_step(steps, f) for f in fractions} - {steps}))


@dataclass(frozen=True)
class RunConfig:
    """What anyone can read off a training script without running it."""

    optimizer: str  # optimizer class name, e.g. "Adam"
    lr: float  # the first parameter group's largest rate over the run (a schedule's peak)
    batch_size: int  # examples in the first batch
    steps: int  # optimizer updates the run made
    n_classes: int  # last dimension of the model's first output: its outputs (see Monitor)
    layer_widths: tuple[int, ...]  # the first layer's input, then each layer's output width
    param_count: int  # trainable and frozen parameters together
    kind: str = ""  # what the task predicts (faultbench.tasks.kinds); "": not known
    score: str = "accuracy"  # the metric train_acc / val_acc hold (higher is better)
    chance: float = math.nan  # the score of the best constant predictor on the targets
    loss_reference: float = math.nan  # the loss an untrained model starts near (ln C, var y)

    @property
    def chance_level(self) -> float:
        """The score a constant predictor gets: :attr:`chance`, or, for a run whose kind is
        not known but whose output scores two or more classes, one in C; NaN otherwise (a
        check that needs it stays silent)."""
        if math.isfinite(self.chance):
            return self.chance
        return 1.0 / self.n_classes if self._classes_assumed else math.nan

    @property
    def start_loss(self) -> float:
        """The loss an untrained model starts near: :attr:`loss_reference`, or, for a run
        whose kind is not known but whose output scores two or more classes, ln C; NaN
        otherwise."""
        if math.isfinite(self.loss_reference):
            return self.loss_reference
        return math.log(self.n_classes) if self._classes_assumed else math.nan

    @property
    def _classes_assumed(self) -> bool:
        return self.kind in ("", "multiclass", "next_token") and self.n_classes >= 2

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready mapping."""
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def until(self, trace: Trace) -> RunConfig:
        """This configuration as a run stopped where ``trace`` (a prefix of this run's, see
        :meth:`Trace.prefix`) ends would have it: its steps, and the largest rate seen."""
        rates = trace.lr[np.isfinite(trace.lr)]
        return replace(self, steps=trace.steps, lr=float(rates.max()) if len(rates) else self.lr)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunConfig:
        """Inverse of :meth:`to_dict` (a record of older code lacks the fields added since)."""
        return cls(**{**data, "layer_widths": tuple(data["layer_widths"])})


def whole_microseconds(seconds: Any) -> np.ndarray:
    """Wall-clock seconds kept to the microsecond, as the Monitor records its timings.

    A loaded machine's timing jitter is far larger than a microsecond, and a finer record
    only costs space: whole microseconds are what the runs dataset stores as integers,
    and read back as these exact floats (the nearest double to n / 10**6)."""
    return np.rint(np.asarray(seconds, dtype=np.float64) * 1e6) / 1e6


def _array(values: Any) -> np.ndarray:
    return np.asarray(values, dtype=np.float64)


#: Fields holding one array per layer or per activation module.
SERIES_BY_NAME = (
    "grad_norm",
    "grad_mean_abs",
    "update_ratio",
    "weight_norm",
    "nonpositive_share",
    "saturated_share",
    "activation_mean_abs",
    "attention_entropy",
    "attention_future",
)


#: Fields with one entry per optimizer update.
PER_STEP = (
    "loss",
    "wait_seconds",
    "compute_seconds",
    "batch_acc",
    "lr",
    "counted_share",
    "padding_share",
    "padding_counted_share",
)
#: Fields with one entry per evaluation (``metrics`` holds more, by name).
PER_EVALUATION = ("eval_steps", "train_acc", "val_acc", "val_loss", "val_token_acc")


@dataclass(frozen=True, eq=False)
class Trace:
    """Per-step and per-interval measurements of one run.

    Three lengths of series: *per step* (``loss``, ``batch_acc``, the two
    timings, the rate, the counted and padding shares) have one entry per
    optimizer update; *per recorded step* (every other per-step field) one
    entry per step listed in ``stat_steps`` (every step unless the Monitor was
    made with ``every > 1``); ``eval_*`` one entry
    per evaluation. A "layer" is a module with parameters of its own, named by
    its path in the model (``model.named_modules()``); an "activation module"
    is an ``nn.ReLU``-family, ``nn.Sigmoid`` or ``nn.Tanh`` module, and an "attention
    module" one that returns its weights (:mod:`faultbench.training.attention`),
    likewise named. Non-finite values are data (a diverged run); NaN also marks a step
    that had no value (no output given, no forward of that module).
    """

    loss: np.ndarray  # training loss of each step's batch
    grad_norm: dict[str, np.ndarray]  # per layer, per recorded step: L2 norm of its gradient
    update_ratio: dict[str, np.ndarray]  # per layer: |update| / |weights before it|
    zero_grad_share: np.ndarray  # per recorded step: share of all weights whose gradient is 0
    inactive_share: np.ndarray  # per recorded step: share of ReLU-family units <= 0 on the batch
    wait_seconds: np.ndarray  # time spent waiting for the batch
    compute_seconds: np.ndarray  # time from batch in hand to update done
    eval_steps: np.ndarray  # the step after which each evaluation ran
    # The task's score (RunConfig.score, higher is better: accuracy for a classifier, exact
    # match for a sequence task, R² for a regression, F1 for labels), per evaluation:
    train_acc: np.ndarray  # on (a sample of) the training targets as trained
    val_acc: np.ndarray  # on the validation set
    val_loss: np.ndarray  # loss on the validation set
    input_stats: dict[str, float] = field(default_factory=dict)  # first batch: mean, std, abs_max
    no_grad_weights: dict[str, int] = field(default_factory=dict)  # per layer: never got a gradient
    weight_change: dict[str, float] = field(default_factory=dict)  # per layer: |w_end-w_0|/|w_0|
    weight_count: dict[str, int] = field(default_factory=dict)  # per layer: parameters
    stat_steps: np.ndarray = field(default_factory=lambda: np.zeros(0))  # 0-based recorded steps
    batch_acc: np.ndarray = field(default_factory=lambda: np.zeros(0))  # per step: the batch's
    # score (the kind's: accuracy, F1, R²; NaN where the step's output could not be read)
    grad_mean_abs: dict[str, np.ndarray] = field(default_factory=dict)  # per layer: mean |gradient|
    weight_norm: dict[str, np.ndarray] = field(default_factory=dict)  # per layer: |w| before update
    nonpositive_share: dict[str, np.ndarray] = field(default_factory=dict)  # ReLU family: out <= 0
    saturated_share: dict[str, np.ndarray] = field(default_factory=dict)  # Sigmoid/Tanh: |x| > 5
    activation_mean_abs: dict[str, np.ndarray] = field(default_factory=dict)  # mean |output|
    lr: np.ndarray = field(default_factory=lambda: np.zeros(0))  # per step: first group's rate
    # Per sampling k (as text), per layer: weights never given a gradient on the steps
    # Monitor(every=k) records. An every-step trace keeps them so that it can be read at k.
    no_grad_sampled: dict[str, dict[str, int]] = field(default_factory=dict)
    # Sequence models (NaN, or empty, for a classifier's run):
    val_token_acc: np.ndarray = field(default_factory=lambda: np.zeros(0))  # per evaluation
    counted_share: np.ndarray = field(default_factory=lambda: np.zeros(0))  # per step: targets
    # counted in the loss (not the ignore index) / target positions
    padding_share: np.ndarray = field(default_factory=lambda: np.zeros(0))  # per step: padding
    # positions / positions (a mask given to Monitor.step)
    padding_counted_share: np.ndarray = field(default_factory=lambda: np.zeros(0))  # per step:
    # padding positions whose target counted / padding positions
    attention_entropy: dict[str, np.ndarray] = field(default_factory=dict)  # per attention
    # module, per recorded step: mean entropy of a row of weights (nats)
    attention_future: dict[str, np.ndarray] = field(default_factory=dict)  # per attention
    # module, per recorded step: mean share of a row's weight on later positions (0: causal)
    # Every metric logged, per evaluation, by its name (<split>_<metric>: val_r2, val_mae,
    # train_f1; faultbench.tasks.kinds.METRICS gives each one's direction); NaN where absent.
    metrics: dict[str, np.ndarray] = field(default_factory=dict)
    # Per step the Monitor was asked to mark (as text): the END_OF_RUN summaries as they
    # stood after that step, so that the trace can be cut there (prefix).
    at_steps: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def steps(self) -> int:
        """Number of recorded optimizer steps."""
        return len(self.loss)

    @property
    def every(self) -> int:
        """The steps between recorded per-layer statistics (1: every step)."""
        steps = self.stat_steps
        return int(steps[1] - steps[0]) if len(steps) > 1 else 1

    @property
    def samplings(self) -> tuple[int, ...]:
        """Every ``every`` this trace can be read at with :meth:`sampled`."""
        return (self.every, *(int(k) for k in self.no_grad_sampled if int(k) != self.every))

    def sampled(self, every: int) -> Trace:
        """This trace as ``Monitor(every=every)`` would have recorded the same loop.

        The per-step series are the same; the per-recorded-step ones keep the
        steps ``0, every, 2 * every, ...``; the weights never given a gradient
        are those counted on those steps. Exact for the samplings the trace
        kept counts for (:attr:`samplings`), and for its own.

        Raises:
            ValueError: ``every`` is not one of :attr:`samplings`.
        """
        if every == self.every:
            return self
        if str(every) not in self.no_grad_sampled:
            raise ValueError(
                f"this trace can be read at every={list(self.samplings)}; got every={every} "
                "(an every-step trace keeps the weights without gradient for those samplings only)"
            )
        keep = self.stat_steps % every == 0
        per_recorded: dict[str, Any] = {
            name: {k: v[keep] for k, v in getattr(self, name).items()} for name in SERIES_BY_NAME
        }
        return replace(
            self,
            zero_grad_share=self.zero_grad_share[keep],
            inactive_share=self.inactive_share[keep],
            stat_steps=self.stat_steps[keep],
            no_grad_weights=dict(self.no_grad_sampled[str(every)]),
            no_grad_sampled={},
            at_steps={
                step: {
                    **marked,
                    "no_grad_weights": dict(marked["no_grad_sampled"][str(every)]),
                    "no_grad_sampled": {},
                }
                for step, marked in self.at_steps.items()
            },
            **per_recorded,
        )

    def prefix(self, fraction: float) -> Trace:
        """This trace cut at the share ``fraction`` of its steps (:func:`prefix_step`), as the
        same loop stopped there would have recorded it; ``1.0``: the whole trace.

        Raises:
            ValueError: a fraction outside (0, 1], or a step the trace kept no summaries at.
        """
        if not 0.0 < fraction <= 1.0:
            raise ValueError(f"prefix({fraction!r}): expected a share of the run's steps in (0, 1]")
        return self if fraction == 1.0 else self.until(prefix_step(self.steps, fraction))

    def until(self, step: int) -> Trace:
        """This trace cut after update ``step`` (1-based): the per-step series to their first
        ``step`` entries, the recorded steps and the evaluations up to it, and the end-of-run
        summaries as the Monitor marked them there (:attr:`at_steps`).

        Raises:
            ValueError: ``step`` is past the trace's end, or is not a step it was marked at.
        """
        if step == self.steps:
            return self
        if str(step) not in self.at_steps:
            raise ValueError(
                f"this trace can be cut after steps {sorted(int(k) for k in self.at_steps)} "
                f"or {self.steps} (its end); got {step} (Monitor(marks=...) keeps the "
                "summaries a cut needs)"
            )
        recorded = self.stat_steps < step
        evaluated = self.eval_steps <= step
        per_recorded: dict[str, Any] = {
            name: {k: v[recorded] for k, v in getattr(self, name).items()}
            for name in SERIES_BY_NAME
        }
        per_step = {name: getattr(self, name)[:step] for name in PER_STEP}
        per_eval = {  # an older record's empty series stays empty
            name: values[evaluated] if len(values) == len(evaluated) else values
            for name in PER_EVALUATION
            for values in [getattr(self, name)]
        }
        summaries = self.at_steps[str(step)]
        return replace(
            self,
            zero_grad_share=self.zero_grad_share[recorded],
            inactive_share=self.inactive_share[recorded],
            stat_steps=self.stat_steps[recorded],
            metrics={k: v[evaluated] for k, v in self.metrics.items()},
            no_grad_weights=dict(summaries["no_grad_weights"]),
            weight_change=dict(summaries["weight_change"]),
            no_grad_sampled={k: dict(v) for k, v in summaries["no_grad_sampled"].items()},
            at_steps={k: v for k, v in self.at_steps.items() if int(k) < step},
            **per_recorded,
            **per_step,
            **per_eval,
        )

    @property
    def wait_share(self) -> float:
        """Share of total step time spent waiting for data."""
        wait, compute = float(self.wait_seconds.sum()), float(self.compute_seconds.sum())
        return wait / (wait + compute) if wait + compute > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready mapping (floats may be non-finite; the store encodes them)."""
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, np.ndarray):
                out[f.name] = value.tolist()
            elif isinstance(value, dict):
                out[f.name] = {
                    k: v.tolist() if isinstance(v, np.ndarray) else v for k, v in value.items()
                }
            else:
                out[f.name] = value
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Trace:
        """Inverse of :meth:`to_dict`."""
        kwargs: dict[str, Any] = {}
        for f in fields(cls):
            if f.name not in data and f.default_factory is not MISSING:
                continue  # a field added since (a record of other code is keyed apart anyway)
            value = data[f.name]
            if f.name in SERIES_BY_NAME or f.name == "metrics":
                kwargs[f.name] = {k: _array(v) for k, v in value.items()}
            elif f.name in ("no_grad_sampled", "at_steps"):
                kwargs[f.name] = {k: dict(v) for k, v in value.items()}
            elif isinstance(value, list):
                kwargs[f.name] = _array(value)
            else:
                kwargs[f.name] = dict(value)
        return cls(**kwargs)
