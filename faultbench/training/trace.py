"""What a run leaves behind for a diagnoser: its trace and observable configuration."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np


@dataclass(frozen=True)
class RunConfig:
    """What anyone can read off a training script without running it."""

    optimizer: str  # optimizer class name, e.g. "Adam"
    lr: float  # learning rate of the first parameter group
    batch_size: int  # examples in the first batch
    steps: int  # optimizer updates the run made
    n_classes: int  # width of the model's last linear layer
    layer_widths: tuple[int, ...]  # inputs, then each linear layer's outputs
    param_count: int  # trainable and frozen parameters together

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready mapping."""
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunConfig:
        """Inverse of :meth:`to_dict`."""
        return cls(**{**data, "layer_widths": tuple(data["layer_widths"])})


def _array(values: Any) -> np.ndarray:
    return np.asarray(values, dtype=np.float64)


@dataclass(frozen=True, eq=False)
class Trace:
    """Per-step and per-interval measurements of one run.

    Per-step arrays all have one entry per optimizer update; ``eval_*`` arrays
    have one entry per evaluation. Non-finite values are data (a diverged run).
    """

    loss: np.ndarray  # training loss of each step's batch
    grad_norm: dict[str, np.ndarray]  # per linear layer: L2 norm of its gradient
    update_ratio: dict[str, np.ndarray]  # per layer: |update| / |weights before it|
    zero_grad_share: np.ndarray  # share of all weights whose gradient is exactly 0
    inactive_share: np.ndarray  # share of hidden units that output 0 on the whole batch
    wait_seconds: np.ndarray  # time spent waiting for the batch
    compute_seconds: np.ndarray  # time from batch in hand to update done
    eval_steps: np.ndarray  # the step after which each evaluation ran
    train_acc: np.ndarray  # accuracy on (a sample of) the training labels as trained
    val_acc: np.ndarray  # accuracy on the validation set
    val_loss: np.ndarray  # loss on the validation set
    input_stats: dict[str, float] = field(default_factory=dict)  # first batch: mean, std, abs_max
    no_grad_weights: dict[str, int] = field(default_factory=dict)  # per layer: never got a gradient
    weight_change: dict[str, float] = field(default_factory=dict)  # per layer: |w_end-w_0|/|w_0|
    weight_count: dict[str, int] = field(default_factory=dict)  # per layer: parameters

    @property
    def steps(self) -> int:
        """Number of recorded optimizer steps."""
        return len(self.loss)

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
            value = data[f.name]
            if f.name in ("grad_norm", "update_ratio"):
                kwargs[f.name] = {k: _array(v) for k, v in value.items()}
            elif isinstance(value, list):
                kwargs[f.name] = _array(value)
            else:
                kwargs[f.name] = dict(value)
        return cls(**kwargs)
