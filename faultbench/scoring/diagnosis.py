"""The diagnoser registry the CLI resolves names against (what a diagnoser is, may declare
and answers: :mod:`faultbench.scoring.contract`, re-exported here)."""

from __future__ import annotations

import importlib
import math
import os
import sys
from collections.abc import Callable
from types import ModuleType

from faultbench.core.errors import FaultbenchError, unknown_name
from faultbench.core.registry import Registry
from faultbench.scoring.contract import (
    UNDECIDED,
    UNKNOWN,
    Diagnoser,
    Diagnosis,
    instruments_of,
    is_diagnoser,
)

__all__ = [
    "DIAGNOSERS",
    "UNDECIDED",
    "UNKNOWN",
    "Diagnoser",
    "Diagnosis",
    "diagnoser_names",
    "finite_or_none",
    "get_diagnoser",
    "instruments_of",
    "is_diagnoser",
    "load",
    "ships_with_faultbench",
]

ENTRY_POINT_GROUP = "faultbench.diagnosers"


#: Shipped, registered and plug-in diagnosers: name -> zero-argument factory.
DIAGNOSERS: Registry[Callable[[], Diagnoser]] = Registry(
    "diagnoser",
    builtin="faultbench.diagnosers",
    group=ENTRY_POINT_GROUP,
    adapt=lambda name, obj: _plugin_factory(obj, name),
)


def ships_with_faultbench(diagnoser: Diagnoser) -> bool:
    """Whether ``diagnoser``'s class is one of the diagnosers faultbench ships."""
    return type(diagnoser).__module__.split(".")[:2] == ["faultbench", "diagnosers"]


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


def load(diagnoser: str) -> object:
    """The object a registered name or ``module:Class`` stands for, built but not checked
    against the contract (``faultbench check`` reports each of its problems).

    Raises:
        FaultbenchError: an unknown name, or a module that does not import.
    """
    if ":" in diagnoser:
        return _import(diagnoser)
    return DIAGNOSERS.get(diagnoser)()


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
        module = _import_module(module_name)
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


def _import_module(name: str) -> ModuleType:
    """``name`` imported; a module that is not installed is looked for in the working
    folder too, as ``python -m`` would (a diagnoser being written, not yet installed)."""
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        here = os.getcwd()
        if exc.name != name.partition(".")[0] or here in sys.path:
            raise
        sys.path.append(here)  # a worker process gets this sys.path too
        return importlib.import_module(name)


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
