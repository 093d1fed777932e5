"""Diagnosers and their answers; the registry the CLI resolves names against."""

from __future__ import annotations

import importlib
import math
from collections.abc import Callable, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from faultbench.core.errors import FaultbenchError, unknown_name
from faultbench.core.registry import Registry
from faultbench.scoring.run import Run
from faultbench.training.instruments import InstrumentRef, references

UNKNOWN = "unknown"  # a diagnoser's way to say "I cannot tell"
# A diagnoser's way to say "not yet": the run so far cannot be judged (a run cut early, a
# single evaluation). Scored apart from right and wrong: never correct, never an alarm, and
# its share is reported.
UNDECIDED = "undecided"
ENTRY_POINT_GROUP = "faultbench.diagnosers"


@dataclass(frozen=True)
class Diagnosis:
    """A diagnoser's answer about one run."""

    label: str  # a condition name (a fault or "healthy"), or "unknown" to abstain
    confidence: float | None = None  # in [0, 1] where the diagnoser can say
    evidence: Mapping[str, Any] = field(default_factory=dict)  # the numbers that decided it
    also: tuple[str, ...] = ()  # further faults, for a run with several at once

    @property
    def labels(self) -> tuple[str, ...]:
        """Every label named: ``label`` first, then ``also``."""
        return (self.label, *self.also)

    def __post_init__(self) -> None:
        if self.confidence is not None and not 0.0 <= self.confidence <= 1.0:
            raise ValueError(f"confidence must be in [0, 1]; got {self.confidence}")


@runtime_checkable
class Diagnoser(Protocol):
    """Anything with a ``name``, a ``tuned_on`` set and ``diagnose(run)``."""

    @property
    def name(self) -> str:
        """The diagnoser's name in reports."""
        ...

    @property
    def tuned_on(self) -> AbstractSet[str]:
        """Names of the tasks whose results shaped it (tuned-on vs held-out)."""
        ...

    def diagnose(self, run: Run) -> Diagnosis:
        """Name what is wrong with ``run``."""
        ...


#: Shipped, registered and plug-in diagnosers: name -> zero-argument factory.
DIAGNOSERS: Registry[Callable[[], Diagnoser]] = Registry(
    "diagnoser",
    builtin="faultbench.diagnosers",
    group=ENTRY_POINT_GROUP,
    adapt=lambda name, obj: _plugin_factory(obj, name),
)


def is_diagnoser(obj: object) -> bool:
    """Whether ``obj`` has what a diagnoser needs."""
    return (
        isinstance(getattr(obj, "name", None), str)
        and isinstance(getattr(obj, "tuned_on", None), (set, frozenset))
        and callable(getattr(obj, "diagnose", None))
    )


def ships_with_faultbench(diagnoser: Diagnoser) -> bool:
    """Whether ``diagnoser``'s class is one of the diagnosers faultbench ships."""
    return type(diagnoser).__module__.split(".")[:2] == ["faultbench", "diagnosers"]


def instruments_of(diagnoser: object) -> tuple[InstrumentRef, ...]:
    """The instruments ``diagnoser`` asks to have attached to the loop of every run it is
    scored on: its ``instrument`` attribute, a registered instrument's name (or a tuple of
    names); none without one (see :mod:`faultbench.training.instruments`).

    Raises:
        FaultbenchError: an unknown instrument name, or an attribute of another type.
    """
    asked = getattr(diagnoser, "instrument", None)
    if asked is None:
        return ()
    if not (
        isinstance(asked, str)
        or (isinstance(asked, tuple) and all(isinstance(a, str) for a in asked))
    ):
        name = getattr(diagnoser, "name", type(diagnoser).__name__)
        raise FaultbenchError(
            f"diagnoser '{name}' declares instrument={asked!r}; expected a registered "
            "instrument's name or a tuple of names (faultbench.training.instruments.INSTRUMENTS)"
        )
    return references(asked)


def get_diagnoser(diagnoser: str | Diagnoser) -> Diagnoser:
    """Resolve a diagnoser object, a registered name, or ``module:Class``.

    ``module:Class`` imports that module, which runs its code: use it only with
    code you trust.

    Raises:
        FaultbenchError: unknown name, a module that does not import, or an
            object that is not a diagnoser.
    """
    if not isinstance(diagnoser, str):
        return _checked(diagnoser, repr(diagnoser))
    if ":" in diagnoser:
        return _checked(_import(diagnoser), diagnoser)
    return _checked(DIAGNOSERS.get(diagnoser)(), diagnoser)


def diagnoser_names() -> list[str]:
    """Registered names, including installed plug-ins' entry points."""
    return DIAGNOSERS.names()


def _checked(obj: object, where: str) -> Diagnoser:
    if not is_diagnoser(obj):
        raise FaultbenchError(
            f"'{where}' is not a diagnoser: expected an object with a str 'name', a set "
            f"'tuned_on' and a 'diagnose(run)' method; got {type(obj).__name__}"
        )
    return obj  # type: ignore[return-value]


def _import(spec: str) -> object:
    module_name, _, attr = spec.partition(":")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # any import-time failure is the user's input
        raise FaultbenchError(
            f"Cannot import '{module_name}' from '{spec}': {type(exc).__name__}: {exc}"
        ) from None
    if not hasattr(module, attr):
        public = [n for n in dir(module) if not n.startswith("_")]
        raise unknown_name(f"attribute of module '{module_name}'", attr, public)
    obj = getattr(module, attr)
    if isinstance(obj, type):
        try:
            obj = obj()
        except Exception as exc:
            raise FaultbenchError(
                f"Cannot build '{spec}' with no arguments: {type(exc).__name__}: {exc}"
            ) from None
    return obj


def _plugin_factory(obj: object, where: str) -> Callable[[], Diagnoser]:
    """A plug-in's class or factory is built on each lookup; an instance is reused."""
    if is_diagnoser(obj) and not isinstance(obj, type):
        return lambda: obj  # type: ignore[return-value]
    if not callable(obj):
        raise TypeError(f"expected a diagnoser, its class or a factory; got {type(obj).__name__}")
    return lambda: _checked(obj(), where)


def finite_or_none(value: float) -> float | None:
    """``value`` if finite, else None (for evidence that must stay JSON-clean)."""
    return value if math.isfinite(value) else None
