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

A case also records how close it stands to its source (``FIDELITY_DATA``,
``FIDELITY_MODEL``, ``FIDELITY_CODE``: each :data:`OWN` or ``"stand-in: <what>"``), the
effect the source reports beside the one the script re-enacts, whether the reporter saw
the failure (``OBSERVED``) or inferred it from reading code, the task's kind (``KIND``),
and the ``REFERENCE`` its fixed twin is held to: the twin must be healthy by the
benchmark's one bar (:func:`faultbench.storage.bases.trace_verdict`), the same a drawn
base of the grid passes.
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
#: A fidelity field's value when the case uses the source's own data, model or code
#: (the README's "Fidelity" says what counts as own); any other value is a stand-in.
OWN = "source's own"
STAND_IN = "stand-in: "  # a stand-in's value starts with this, then says what it is
NONE_GIVEN = "none given: "  # a REPORTED_EFFECT whose source gives no number, then its words
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
    "KIND": "the task's kind (faultbench.tasks.kinds), e.g. multiclass or regression",
    "REFERENCE": "the task metric a reasonable model reaches on the data (a Reference)",
    "FIDELITY_DATA": f"{OWN!r}, or {STAND_IN!r} and what stands in for the source's data",
    "FIDELITY_MODEL": f"{OWN!r}, or {STAND_IN!r} and what stands in for the source's model",
    "FIDELITY_CODE": f"{OWN!r}, or {STAND_IN!r} and what stands in for the source's code",
    "REPORTED_EFFECT": "the effect the source reports, with its numbers",
    "REENACTED_EFFECT": "the effect this script shows, with its numbers, beside it",
    "OBSERVED": "True: the reporter saw the failure; False: inferred from reading code",
}
#: The fidelity constants, in the order the tables show them.
FIDELITY = ("FIDELITY_DATA", "FIDELITY_MODEL", "FIDELITY_CODE")
#: The rule that makes a case faithful (realbugs/README.md says what counts as own).
FAITHFUL = (
    "the source's own data, model and code (each FIDELITY_* is OWN: the same data, the same "
    "architecture and the same loop with its hyperparameters, ported to PyTorch if written "
    "for another framework, shortened in epochs only where stated)"
)


def task_kinds() -> tuple[str, ...]:
    """The task kinds a case may declare (:data:`faultbench.tasks.kinds.KINDS`)."""
    from faultbench.tasks.kinds import KINDS

    return tuple(KINDS)


#: Web hosts a case's source may live on: the places the issue names.
SOURCE_HOSTS = (
    "https://github.com/",
    "https://discuss.pytorch.org/",
    "https://stackoverflow.com/",
    "https://datascience.stackexchange.com/",
    "https://stats.stackexchange.com/",
    "https://ai.stackexchange.com/",  # another public Stack Exchange Q&A site of the same kind
)


@dataclass(frozen=True, eq=False)
class CaseRun:
    """What a case's script leaves behind: what a :class:`~faultbench.scoring.run.Run` needs."""

    trace: Trace  # everything the Monitor recorded (every step)
    config: RunConfig  # the observable configuration (Monitor.config())
    probe: Probe  # the script's own model factory, loss and training examples


def _has_number(text: str) -> bool:
    return any(c.isdigit() for c in text)


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
class Reference:
    """What a reasonable model scores on a case's data: the healthy bar of its fixed twin."""

    score: float  # the task metric (accuracy, R²...; higher is better), in (0, 1]
    what: str  # the model that reaches it and how it was measured, or the source's figure

    def __str__(self) -> str:
        return f"{self.score:.3f} ({self.what})"


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
    kind: str  # KIND
    reference: Reference  # REFERENCE
    fidelity_data: str  # FIDELITY_DATA
    fidelity_model: str  # FIDELITY_MODEL
    fidelity_code: str  # FIDELITY_CODE
    reported_effect: str  # REPORTED_EFFECT
    reenacted_effect: str  # REENACTED_EFFECT
    observed: bool  # OBSERVED

    @property
    def faithful(self) -> bool:
        """Whether the case uses the source's own data, model and code (:data:`FAITHFUL`)."""
        return all(value == OWN for value in self.fidelity)

    @property
    def fidelity(self) -> tuple[str, str, str]:
        """FIDELITY_DATA, FIDELITY_MODEL, FIDELITY_CODE."""
        return (self.fidelity_data, self.fidelity_model, self.fidelity_code)

    def twin_verdict(self, run: CaseRun) -> str:
        """Why a run of the fixed twin is not healthy by the benchmark's one bar against
        :attr:`reference`, or "" when it is (the bar a drawn base of the grid passes)."""
        from faultbench.storage.bases import trace_verdict

        return trace_verdict(run.trace, self.reference.score)

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
            module.KIND,
            module.REFERENCE,
            module.FIDELITY_DATA,
            module.FIDELITY_MODEL,
            module.FIDELITY_CODE,
            module.REPORTED_EFFECT,
            module.REENACTED_EFFECT,
            module.OBSERVED,
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
        return self._fidelity_problem() or self._text_problem()

    def _fidelity_problem(self) -> str:
        if self.kind not in task_kinds():
            nearest = ", ".join(task_kinds())
            return f"KIND {self.kind!r} is not a task kind; expected one of {nearest}"
        if not isinstance(self.reference, Reference) or not 0 < self.reference.score <= 1:
            return f"REFERENCE {self.reference!r}; expected a Reference with a score in (0, 1]"
        for name, value in zip(FIDELITY, self.fidelity, strict=True):
            stand_in = (
                isinstance(value, str)
                and value.startswith(STAND_IN)
                and value[len(STAND_IN) :].strip()
            )
            if value != OWN and not stand_in:
                return f"{name} {value!r}; expected {OWN!r} or {STAND_IN!r} and what stands in"
        if not isinstance(self.observed, bool):
            return f"OBSERVED {self.observed!r}; expected True or False"
        if not self.reported_effect.startswith(NONE_GIVEN) and not _has_number(
            self.reported_effect
        ):
            return (
                f"REPORTED_EFFECT {self.reported_effect!r} gives no number; expected the "
                f"effect's size, or {NONE_GIVEN!r} and the source's words"
            )
        if not _has_number(self.reenacted_effect):
            return f"REENACTED_EFFECT {self.reenacted_effect!r} gives no number; expected its size"
        return ""

    def _text_problem(self) -> str:
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
