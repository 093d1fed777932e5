"""The diagnoser contract: everything a diagnoser may declare, in one place.

A diagnoser is any object with the three required attributes of :class:`Diagnoser`
(``name``, ``tuned_on``, ``diagnose``). It may also declare the optional attributes
of :data:`OPTIONAL`, each with its default and meaning; the benchmark reads them
through :func:`contract_of` alone (no other module reads a diagnoser's attribute by
``getattr``: a test greps for it), and :func:`problems` says, one line each, what a
diagnoser declares wrong (``faultbench check`` prints them).

Example::

    class MyDiagnoser:
        name = "mine"
        tuned_on = frozenset({"digits"})
        reads_trace = True            # optional, the default
        subset_seeds = None           # optional: score on every seed

        def diagnose(self, run):
            return Diagnosis("healthy")
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from faultbench.core.errors import FaultbenchError
from faultbench.training.instruments import InstrumentRef, references

if TYPE_CHECKING:
    from faultbench.scoring.run import Run

UNKNOWN = "unknown"  # a diagnoser's way to say "I cannot tell"
# A diagnoser's way to say "not yet": the run so far cannot be judged (a run cut early, a
# single evaluation). Scored apart from right and wrong: never correct, never an alarm, and
# its share is reported.
UNDECIDED = "undecided"


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
    """Anything with a ``name``, a ``tuned_on`` set and ``diagnose(run)``; it may declare
    the optional attributes of :data:`OPTIONAL` too."""

    @property
    def name(self) -> str:
        """The diagnoser's name in reports and in its result file."""
        ...

    @property
    def tuned_on(self) -> AbstractSet[str]:
        """Names of the tasks whose results shaped it (tuned-on vs held-out)."""
        ...

    def diagnose(self, run: Run) -> Diagnosis:
        """Name what is wrong with ``run``."""
        ...


@dataclass(frozen=True)
class Attribute:
    """One attribute a diagnoser may declare."""

    default: Any  # what a diagnoser that does not declare it gets
    meaning: str  # what it says, and what the benchmark does with it


#: The three attributes every diagnoser has.
REQUIRED: dict[str, str] = {
    "name": "str: its name in reports and in results/diagnosers/<name>.*",
    "tuned_on": "set or frozenset of task names whose results shaped it (the rest are held "
    "out); never 'realbugs', a test set",
    "diagnose": "diagnose(run) -> Diagnosis: reads the run (trace, config, probe, instrument "
    "records), never the truth",
}

#: Every optional attribute, with its default and meaning.
OPTIONAL: dict[str, Attribute] = {
    "instrument": Attribute(
        None,
        "a registered instrument's name or a tuple of names: the runs it is scored on are "
        "trained with them in the loop (records of their own); None: it reads finished runs",
    ),
    "prepare": Attribute(
        None,
        "prepare(*, store, engine) -> None: called once before the first diagnosis that is "
        "not stored (fit a model on stored runs); not timed",
    ),
    "reads_trace": Attribute(
        True,
        "bool: False if it never reads run.trace, so its answers cannot depend on the "
        "Monitor's sampling (scored at the default sampling only)",
    ),
    "subset_seeds": Attribute(
        None,
        "int >= 1: seconds per diagnosis, so it is scored on the first N seeds of each grid "
        "and fewer healthy runs (the leaderboard says so); None: every run",
    ),
    "subset_full_grid": Attribute(
        "all",
        "with subset_seeds, what of the full grid it is scored on: 'all' (the first seeds of "
        "each cell) or 'healthy' (its healthy drawn runs alone, for false alarms; "
        "identification then comes from the classic grid, and no prefix is read)",
    ),
    "left_out_of_report": Attribute(
        "",
        "str: why `make report` does not score it (too slow); its result file comes from "
        "its own target and stands with its date; '': scored by `make report`",
    ),
    "probes": Attribute(
        None,
        "bool: whether it trains the run's model through the probe (faultbench list shows "
        "it; probe steps are counted either way); None: not declared",
    ),
}

ATTRIBUTES = (*REQUIRED, *OPTIONAL)  # every name a diagnoser may declare
SUBSET_FULL_GRID = ("all", "healthy")  # the values of subset_full_grid


@dataclass(frozen=True)
class Contract:
    """What one diagnoser declares: its required attributes and every optional one."""

    name: str  # its name
    tuned_on: frozenset[str]  # the tasks it was tuned on
    instrument: tuple[str, ...] = ()  # instruments in the loop of the runs it reads
    prepare: Callable[..., None] | None = field(default=None, compare=False)  # its prepare
    reads_trace: bool = True  # whether its answers can depend on the sampling
    subset_seeds: int | None = None  # scored on the first N seeds only
    subset_full_grid: str = "all"  # with subset_seeds: "all" cells, or "healthy" runs alone
    left_out_of_report: str = ""  # why make report does not score it
    probes: bool | None = None  # whether it trains through the probe (None: not declared)

    def to_dict(self) -> dict[str, Any]:
        """The declared values as JSON (a result file's header): ``prepare`` as a bool."""
        return {
            "name": self.name,
            "tuned_on": sorted(self.tuned_on),
            "instrument": list(self.instrument),
            "prepare": self.prepare is not None,
            "reads_trace": self.reads_trace,
            "subset_seeds": self.subset_seeds,
            "subset_full_grid": self.subset_full_grid,
            "left_out_of_report": self.left_out_of_report,
            "probes": self.probes,
        }


def is_diagnoser(obj: object) -> bool:
    """Whether ``obj`` has the three required attributes of the right kinds."""
    return (
        isinstance(getattr(obj, "name", None), str)
        and isinstance(getattr(obj, "tuned_on", None), (set, frozenset))
        and callable(getattr(obj, "diagnose", None))
    )


def name_of(obj: object) -> str:
    """``obj``'s declared name, or its class's name when it declares none."""
    name = getattr(obj, "name", None)
    return name if isinstance(name, str) else type(obj).__name__


def problems(obj: object) -> list[str]:
    """Every way ``obj`` breaks the contract, one line each (empty: it keeps it)."""
    who = f"diagnoser '{name_of(obj)}'"
    found = []
    if not isinstance(getattr(obj, "name", None), str):
        found.append(f"{who}: 'name' must be a str; got {_kind(getattr(obj, 'name', None))}")
    tuned = getattr(obj, "tuned_on", None)
    if not isinstance(tuned, (set, frozenset)):
        found.append(f"{who}: 'tuned_on' must be a set of task names; got {_kind(tuned)}")
    elif odd := sorted(repr(t) for t in tuned if not isinstance(t, str)):
        found.append(f"{who}: 'tuned_on' must hold task names (str); got {', '.join(odd)}")
    if not callable(getattr(obj, "diagnose", None)):
        found.append(f"{who}: 'diagnose' must be a method diagnose(run) -> Diagnosis")
    for attr, attribute in OPTIONAL.items():
        why = _invalid(attr, getattr(obj, attr, attribute.default))
        if why:
            found.append(f"{who}: '{attr}' {why} ({attribute.meaning.split(':')[0]})")
    return found


def contract_of(obj: object) -> Contract:
    """Every attribute ``obj`` declares, defaults filled in.

    Raises:
        FaultbenchError: the first of :func:`problems`, if any.
    """
    found = problems(obj)
    if found:
        raise FaultbenchError(found[0])
    values = {attr: getattr(obj, attr, attribute.default) for attr, attribute in OPTIONAL.items()}
    asked = values["instrument"]
    return Contract(
        name=getattr(obj, "name"),  # noqa: B009  (the one place a diagnoser's attribute is read)
        tuned_on=frozenset(getattr(obj, "tuned_on")),  # noqa: B009
        instrument=() if asked is None else (asked,) if isinstance(asked, str) else asked,
        prepare=values["prepare"],
        reads_trace=values["reads_trace"],
        subset_seeds=values["subset_seeds"],
        subset_full_grid=values["subset_full_grid"],
        left_out_of_report=values["left_out_of_report"],
        probes=values["probes"],
    )


def instruments_of(diagnoser: object) -> tuple[InstrumentRef, ...]:
    """The instruments ``diagnoser`` asks to have attached to the loop of every run it is
    scored on (its ``instrument``; none without one, see
    :mod:`faultbench.training.instruments`).

    Raises:
        FaultbenchError: an unknown instrument name, or an attribute of another type.
    """
    asked = contract_of(diagnoser).instrument
    return references(asked) if asked else ()


def _invalid(attr: str, value: Any) -> str:
    """Why ``value`` cannot be the optional attribute ``attr``, or ''."""
    if attr == "instrument":
        names = (value,) if isinstance(value, str) else value
        if value is not None and not (
            isinstance(names, tuple) and names and all(isinstance(n, str) for n in names)
        ):
            return f"must be a registered instrument's name or a tuple of names; got {value!r}"
        if value is not None:
            try:
                references(names)
            except FaultbenchError as exc:
                return f"names an unknown instrument: {exc}"
    elif attr == "prepare" and value is not None and not callable(value):
        return f"must be a method prepare(*, store, engine) or None; got {_kind(value)}"
    elif attr == "reads_trace" and not isinstance(value, bool):
        return f"must be True or False; got {value!r}"
    elif attr == "subset_seeds" and value is not None and not _positive_int(value):
        return f"must be an integer of at least 1 or None; got {value!r}"
    elif attr == "subset_full_grid" and value not in SUBSET_FULL_GRID:
        return f"must be one of {', '.join(map(repr, SUBSET_FULL_GRID))}; got {value!r}"
    elif attr == "left_out_of_report" and not isinstance(value, str):
        return f"must be a str (the reason) or ''; got {_kind(value)}"
    elif attr == "probes" and value is not None and not isinstance(value, bool):
        return f"must be True, False or None; got {value!r}"
    return ""


def _positive_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def _kind(value: Any) -> str:
    return "nothing" if value is None else type(value).__name__
