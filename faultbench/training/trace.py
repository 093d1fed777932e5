"""What a run leaves behind for a diagnoser: its trace and observable configuration."""

from __future__ import annotations

import math
from dataclasses import MISSING, dataclass, field, fields, replace
from typing import Any

import numpy as np


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

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunConfig:
        """Inverse of :meth:`to_dict` (a record of older code lacks the fields added since)."""
        return cls(**{**data, "layer_widths": tuple(data["layer_widths"])})


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
            **per_recorded,
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
            elif f.name == "no_grad_sampled":
                kwargs[f.name] = {k: dict(v) for k, v in value.items()}
            elif isinstance(value, list):
                kwargs[f.name] = _array(value)
            else:
                kwargs[f.name] = dict(value)
        return cls(**kwargs)
