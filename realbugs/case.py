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

And it records how it was held to its source (issue 51): ``SOURCE_CHECK`` (a
:class:`SourceCheck`: what of the source was read, whether the label matches the
registry's definition and the script's mechanism the source's), and
``TWIN_DEPARTURES``: every place where the fixed twin departs from the faulty form
beyond the fix, each in words (``()`` when the forms differ on the bug's lines only).
:func:`fixed_branches` counts the places where the script branches on ``fixed``; they
must be the bug's own (``BUG_BRANCHES``, 1 unless the module says otherwise) plus one per
declared departure.
"""

from __future__ import annotations

import ast
import inspect
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, fields
from pathlib import Path
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
    "SOURCE_CHECK": "what of the source was read, and whether label and mechanism match it",
    "TWIN_DEPARTURES": "each place the fixed twin departs from the faulty form beyond the fix",
}
#: How many of the script's branches on ``fixed`` are the bug's own, unless a case's
#: ``BUG_BRANCHES`` says more (a fix moved from one place to another is two).
BUG_BRANCHES = 1
#: What a SourceCheck's label and mechanism start with: the verdict, then ": " and why.
MATCHES = "matches"
PARTLY = "partly"  # the mechanism only: the source's bug, in a stand-in's form (says which)
NOT_CHECKED = "not checked"  # the source was not read again (says why)
VERDICTS = (MATCHES, PARTLY, NOT_CHECKED)
#: Words that mark a text as unfinished: a case carrying one is refused.
PLACEHOLDER = re.compile(r"\b(PLACEHOLDER|TODO|TBD|FIXME|XXX)\b")
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
class SourceCheck:
    """How a case was held to its source: what was read, and what it says of the case.

    ``label`` and ``mechanism`` each start with a verdict of :data:`VERDICTS` and say why
    after ": " (``"matches: the answer blames ..."``). Whether the twin differs from the
    faulty form on the bug's lines only is the case's ``TWIN_DEPARTURES``, counted against
    the script by :func:`fixed_branches`.
    """

    read: str  # what of the source was read, and where (or that the stored corpus lacks it)
    label: str  # whether LABEL is what the registry defines for the source's diagnosis
    mechanism: str  # whether the script breaks what the source broke, the way it broke it

    def problem(self) -> str:
        """Why the check is malformed, or ""."""
        for name in ("label", "mechanism"):
            verdict, _, why = getattr(self, name).partition(": ")
            if verdict not in VERDICTS or not why.strip():
                return f"SOURCE_CHECK.{name} must start with one of {VERDICTS}, ': ' and why"
        if self.label.startswith(PARTLY):
            return "SOURCE_CHECK.label: a label matches its source's diagnosis or is changed"
        if not self.read.strip():
            return "SOURCE_CHECK.read is empty: say what of the source was read"
        return ""

    @property
    def summary(self) -> str:
        """The two verdicts, for the README's table (``label matches, mechanism partly``)."""
        verdicts = (getattr(self, n).partition(": ")[0] for n in ("label", "mechanism"))
        return "label {}, mechanism {}".format(*verdicts)


#: The source check of a case written before issue 51's round (issue 31) and audited in
#: issue 40: issue 51 read again only the cases of the round before it.
AUDITED_BEFORE = SourceCheck(
    read=(
        "not read again in issue 51, which checked the cases added in the round before it: this "
        "case was written for issue 31 from its source, and its label, texts, effect and twin "
        "were audited in issue 40 (realbugs/README.md, 'What issue 40 fixed')."
    ),
    label="not checked: not read again in issue 51 (issue 40's audit kept or changed it).",
    mechanism="not checked: not read again in issue 51.",
)


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
    source_check: SourceCheck  # SOURCE_CHECK
    twin_departures: tuple[str, ...]  # TWIN_DEPARTURES
    bug_branches: int = BUG_BRANCHES  # BUG_BRANCHES, where the module sets it

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
            module.SOURCE_CHECK,
            module.TWIN_DEPARTURES,
            getattr(module, "BUG_BRANCHES", BUG_BRANCHES),
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
        return self._fidelity_problem() or self._check_problem() or self._text_problem()

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

    def _check_problem(self) -> str:
        if not isinstance(self.source_check, SourceCheck):
            return f"SOURCE_CHECK is a {type(self.source_check).__name__}; expected a SourceCheck"
        departures = self.twin_departures
        if not isinstance(departures, tuple) or not all(isinstance(d, str) for d in departures):
            return f"TWIN_DEPARTURES {departures!r}; expected a tuple of texts (or ())"
        if not isinstance(self.bug_branches, int) or self.bug_branches < 1:
            return f"BUG_BRANCHES {self.bug_branches!r}; expected a count of at least 1"
        return self.source_check.problem()

    def texts(self) -> dict[str, str]:
        """Every text the case states, by field (the source check's and departures' too)."""
        texts = {
            f.name: getattr(self, f.name)
            for f in fields(self)
            if isinstance(getattr(self, f.name), str)
        }
        if isinstance(self.source_check, SourceCheck):
            texts.update(
                {
                    f"source_check.{f.name}": getattr(self.source_check, f.name)
                    for f in fields(self.source_check)
                }
            )
        texts.update({f"twin_departures[{i}]": d for i, d in enumerate(self.twin_departures)})
        return texts

    def _text_problem(self) -> str:
        texts = self.texts()
        empty = [k for k, v in texts.items() if not v.strip()]
        if empty:
            return f"empty {empty}"
        unfinished = [k for k, v in texts.items() if PLACEHOLDER.search(v)]
        return f"placeholder text in {unfinished}" if unfinished else ""

    def branch_problem(self) -> str:
        """Why the script's branches on ``fixed`` are not the bug's own plus one per declared
        departure, or "" (read from the case's module source)."""
        found = fixed_branches(Path(inspect.getsourcefile(self.script) or "").read_text())
        declared = self.bug_branches + len(self.twin_departures)
        if len(found) == declared:
            return ""
        lines = ", ".join(str(line) for line in found)
        return (
            f"the script branches on `fixed` {len(found)} times (lines {lines}); the case "
            f"declares {self.bug_branches} for the bug and {len(self.twin_departures)} "
            "TWIN_DEPARTURES: declare every place the twin departs beyond the fix"
        )

    def run(self, *, fixed: bool, **kwargs: Any) -> CaseRun:
        """Run the script in one form (``fixed=False``: the bug as reported)."""
        return self.script(fixed, **kwargs)


def fixed_branches(source: str) -> list[int]:
    """The lines where a case module's code decides on ``fixed``: one per decision.

    A decision is any read of the script's first parameter (``fixed``), or of an attribute
    of that name (``self.fixed``): ``if fixed``, ``x if fixed else y``, ``not fixed``,
    ``fixed and ...``, ``f(widen=fixed)``. Handing the flag on decides nothing, and is not
    counted: passing it to a function or class of the module whose parameter bears the
    same name (its own reads are counted there), or storing it as ``self.fixed``.
    """
    tree = ast.parse(source)
    script = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "script")
    flag = script.args.args[0].arg
    takes_flag = _callables_taking(tree, flag)
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    lines = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Name | ast.Attribute) or _flag_of(node) != flag:
            continue
        if isinstance(node.ctx, ast.Load) and not _hands_on(node, parents, takes_flag):
            lines.append(node.lineno)
    return sorted(lines)


def _callables_taking(tree: ast.Module, flag: str) -> set[str]:
    """The module's functions and classes (by their ``__init__``) with a parameter ``flag``."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name != "script":
            arguments = node.args.args + node.args.kwonlyargs
            if any(a.arg == flag for a in arguments):
                names.add(node.name)
        if isinstance(node, ast.ClassDef) and any(
            isinstance(f, ast.FunctionDef)
            and f.name == "__init__"
            and any(a.arg == flag for a in f.args.args + f.args.kwonlyargs)
            for f in node.body
        ):
            names.add(node.name)
    return names


def _hands_on(node: ast.AST, parents: dict[ast.AST, ast.AST], takes_flag: set[str]) -> bool:
    """Whether this read of the flag only passes it on (see :func:`fixed_branches`)."""
    parent = parents.get(node)
    if isinstance(parent, ast.keyword):
        parent = parents.get(parent)
    if isinstance(parent, ast.Call) and node is not parent.func:
        callee = parent.func
        return isinstance(callee, ast.Name) and callee.id in takes_flag
    while isinstance(parent, ast.Tuple):  # self.a, self.fixed = ..., fixed
        parent = parents.get(parent)
    if isinstance(parent, ast.Assign):
        targets = [t for target in parent.targets for t in ast.walk(target)]
        return any(isinstance(t, ast.Attribute) and t.attr == _flag_of(node) for t in targets)
    return False


def _flag_of(node: ast.AST) -> str:
    return node.id if isinstance(node, ast.Name) else getattr(node, "attr", "")
