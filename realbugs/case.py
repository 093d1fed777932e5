"""One real bug: where it was reported, what was seen, what it deserves, and its check.

A case is one module of :mod:`faultbench.realbugs.cases` (Defects4J's one bug per
case). Its module-level constants say where the bug was reported (``SOURCE``), what
the reporter saw (``REPORTED``), the accepted diagnosis (``DIAGNOSIS``), the label
the diagnosis deserves among the known faults or ``other_fault`` (``LABEL``), the
kind of model, the optimizer, what the data stands in for (``DATA``), the symptom
the source describes as a check on the trace (``SYMPTOM``), and ``SEED``; then ONE
function ``script(fixed, *, epochs=EPOCHS)`` trains the reporter's model in the
reporter's loop under :class:`faultbench.Monitor` and returns a :class:`CaseRun`.
The faulty (``fixed=False``) and fixed forms share every line but the bug's.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, fields
from types import ModuleType
from typing import Any

import numpy as np

from faultbench.core.errors import FaultbenchError
from faultbench.scoring.run import Probe
from faultbench.training.trace import RunConfig, Trace

#: What a model kind can be (the issue asks for at least five of them).
MODEL_KINDS = ("mlp", "linear", "cnn", "recurrent", "embedding", "transformer")
#: The constants every case module defines, and what each one holds.
CONSTANTS = {
    "SOURCE": "the public address where the bug was reported",
    "REPORTED": "the symptom the reporter saw, in our words",
    "DIAGNOSIS": "the accepted diagnosis, in our words",
    "LABEL": "a known fault, or other_fault when none of them fits",
    "MODEL": f"the kind of model, one of {', '.join(MODEL_KINDS)}",
    "OPTIMIZER": "the optimizer's class name, as torch.optim spells it",
    "DATA": "what the case trains on, and what it stands in for",
    "SYMPTOM": "the reported symptom as a check on the trace (a Symptom)",
    "SEED": "the seed every draw of the script comes from",
}
#: Web hosts a case's source may live on: the places the issue names.
SOURCE_HOSTS = ("https://github.com/", "https://discuss.pytorch.org/", "https://stackoverflow.com/")


@dataclass(frozen=True, eq=False)
class CaseRun:
    """What a case's script leaves behind: what a :class:`~faultbench.scoring.run.Run` needs."""

    trace: Trace  # everything the Monitor recorded (every step)
    config: RunConfig  # the observable configuration (Monitor.config())
    probe: Probe  # the script's own model factory, loss and training examples


def _last_finite(values: np.ndarray) -> float:
    finite = values[np.isfinite(values)]
    return float(finite[-1]) if len(finite) else math.nan


def _tenth(loss: np.ndarray, last: bool) -> float:
    finite = loss[np.isfinite(loss)]
    if len(finite) == 0:
        return math.nan
    n = max(1, len(finite) // 10)
    return float(np.mean(finite[-n:] if last else finite[:n]))


def _rebound(loss: np.ndarray) -> float:
    """Last tenth's mean over the lowest point of the loss (smoothed over a 20th)."""
    finite = loss[np.isfinite(loss)]
    if len(finite) == 0:
        return math.nan
    window = max(1, len(finite) // 20)
    smooth = np.convolve(finite, np.ones(window) / window, mode="valid")
    lowest = float(smooth.min())
    return _tenth(finite, last=True) / lowest if lowest > 0 else math.inf


def _peak_drop(values: np.ndarray) -> float:
    finite = values[np.isfinite(values)]
    return float(finite.max() - finite[-1]) if len(finite) else math.nan


#: signal name -> (what it is, how it is read off a trace and its config).
SIGNALS: dict[str, tuple[str, Callable[[Trace, RunConfig, str], float]]] = {
    "final_val_acc": ("final validation accuracy", lambda t, c, _: _last_finite(t.val_acc)),
    "final_train_acc": ("final training accuracy", lambda t, c, _: _last_finite(t.train_acc)),
    "train_val_gap": (
        "final training minus validation accuracy",
        lambda t, c, _: _last_finite(t.train_acc) - _last_finite(t.val_acc),
    ),
    "val_acc_drop": (
        "validation accuracy lost after its best evaluation",
        lambda t, c, _: _peak_drop(t.val_acc),
    ),
    "final_val_loss": ("final validation loss", lambda t, c, _: _last_finite(t.val_loss)),
    "loss_ratio": (
        "the training loss's last-tenth mean over its first-tenth mean",
        lambda t, c, _: _tenth(t.loss, last=True) / _tenth(t.loss, last=False),
    ),
    "loss_rebound": (
        "the training loss's last-tenth mean over its lowest (smoothed) value",
        lambda t, c, _: _rebound(t.loss),
    ),
    "min_loss": (
        "the lowest finite training loss",
        lambda t, c, _: (
            float(np.nanmin(np.where(np.isfinite(t.loss), t.loss, np.nan)))
            if np.isfinite(t.loss).any()
            else math.nan
        ),
    ),
    "nonfinite_loss": (
        "share of steps whose training loss is NaN or infinite",
        lambda t, c, _: float(np.mean(~np.isfinite(t.loss))) if len(t.loss) else math.nan,
    ),
    "wait_share": ("share of step time spent waiting for data", lambda t, c, _: t.wait_share),
    "relu_inactive": (
        "mean share of ReLU-family units at or below 0 on the batch",
        lambda t, c, _: float(np.nanmean(t.inactive_share)) if len(t.inactive_share) else math.nan,
    ),
    "weight_change": (
        "relative change of a layer's weights over the run, |w_end - w_0| / |w_0|",
        lambda t, c, layer: float(t.weight_change.get(layer, math.nan)),
    ),
}


@dataclass(frozen=True)
class Symptom:
    """The reported symptom as a check: a signal of the trace beyond a threshold."""

    signal: str  # a key of SIGNALS
    above: float | None = None  # the symptom shows when the value is above this
    below: float | None = None  # or below this
    layer: str = ""  # the layer, for per-layer signals (weight_change)

    def __post_init__(self) -> None:
        if self.signal not in SIGNALS:
            raise ValueError(f"unknown signal {self.signal!r}; expected one of {sorted(SIGNALS)}")
        if (self.above is None) == (self.below is None):
            raise ValueError(f"Symptom({self.signal!r}) needs exactly one of above= or below=")
        if self.signal == "weight_change" and not self.layer:
            raise ValueError("Symptom('weight_change') needs the layer= it watches")

    def value(self, trace: Trace, config: RunConfig) -> float:
        """The signal's value on one run."""
        return SIGNALS[self.signal][1](trace, config, self.layer)

    def shows(self, trace: Trace, config: RunConfig) -> bool:
        """Whether the run shows the symptom (an undefined value never does)."""
        value = self.value(trace, config)
        if math.isnan(value):
            return False
        return value > self.above if self.above is not None else value < self.below  # type: ignore[operator]

    def __str__(self) -> str:
        what = SIGNALS[self.signal][0]
        if self.layer:
            what += f" of layer '{self.layer}'"
        if self.above is not None:
            return f"{what} > {self.above:g}"
        return f"{what} < {self.below:g}"


@dataclass(frozen=True)
class Case:
    """One real bug, read off its module (see the module docstring)."""

    name: str  # the module's name: the case's id
    source: str  # SOURCE
    reported: str  # REPORTED
    diagnosis: str  # DIAGNOSIS
    label: str  # LABEL
    model: str  # MODEL
    optimizer: str  # OPTIMIZER
    data: str  # DATA
    symptom: Symptom  # SYMPTOM
    seed: int  # SEED
    script: Callable[..., CaseRun]  # script(fixed, *, epochs=...)

    @classmethod
    def from_module(cls, module: ModuleType, labels: list[str]) -> Case:
        """The case a module defines, every constant checked.

        Raises:
            FaultbenchError: a constant missing or malformed, or no ``script``.
        """
        name = module.__name__.rpartition(".")[2]
        missing = [c for c in CONSTANTS if not hasattr(module, c)]
        if missing or not callable(getattr(module, "script", None)):
            raise FaultbenchError(
                f"real-bug case '{name}' lacks {missing or ['script']}; expected the constants "
                f"{', '.join(CONSTANTS)} and a script(fixed, *, epochs) function"
            )
        case = cls(
            name,
            module.SOURCE,
            module.REPORTED,
            module.DIAGNOSIS,
            module.LABEL,
            module.MODEL,
            module.OPTIMIZER,
            module.DATA,
            module.SYMPTOM,
            module.SEED,
            module.script,
        )
        problem = case._problem(labels)
        if problem:
            raise FaultbenchError(f"real-bug case '{name}': {problem}")
        return case

    def _problem(self, labels: list[str]) -> str:
        if not self.source.startswith(SOURCE_HOSTS) or " " in self.source:
            return f"SOURCE {self.source!r} is not an address on {', '.join(SOURCE_HOSTS)}"
        if self.label not in labels or self.label == "healthy":
            return f"LABEL {self.label!r} is not a fault label; expected one of {labels[1:]}"
        if self.model not in MODEL_KINDS:
            return f"MODEL {self.model!r}; expected one of {MODEL_KINDS}"
        if not isinstance(self.symptom, Symptom):
            return f"SYMPTOM is a {type(self.symptom).__name__}; expected a Symptom"
        texts = {
            f.name: getattr(self, f.name)
            for f in fields(self)
            if isinstance(getattr(self, f.name), str)
        }
        empty = [k for k, v in texts.items() if not v.strip()]
        return f"empty {empty}" if empty else ""

    def run(self, *, fixed: bool, **kwargs: Any) -> CaseRun:
        """Run the script in one form (``fixed=False``: the bug as reported)."""
        return self.script(fixed, **kwargs)
