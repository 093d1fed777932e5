"""Faults: bugs that wrap a run's recipe, each under the label a diagnoser must answer.

A fault is a label (``frozen_layer``) with one or more mechanisms, its
*variants*: the ways the same bug happens in real scripts (a layer left out of
the optimizer, ``requires_grad = False``, a parameter group at rate 0). A
variant is a function from a recipe to a recipe (see :mod:`.recipe`) that
wraps the parts where the bug lives. A condition applies several in order, so
faults compose; ``healthy`` is the empty condition.

Two registries. :data:`FAULTS` holds the known faults: their names are the
labels a diagnoser may answer (:func:`labels`). :data:`HELD_OUT` holds real
bugs outside them that no diagnoser is told about: their runs belong to the
benchmark, their names to no label set; the answer that names one is
:data:`OTHER_FAULT`.

A condition names a variant as ``fault.variant``; the bare name is the
fault's first variant, its classic form, so the classic grid keeps its names.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from faultbench.core.errors import FaultbenchError, unknown_name
from faultbench.core.registry import Registry
from faultbench.faults.recipe import Recipe, base_setup  # base_setup: re-exported for callers
from faultbench.faults.source import code_hash
from faultbench.tasks.task import Task

HEALTHY = "healthy"
OTHER_FAULT = "other_fault"  # the answer "something is broken, and it is none of the known faults"
DEFAULT_VARIANT = "default"  # the variant name of a fault given as one transform
PARTS = ("data", "model", "loss", "optimizer", "loader", "step", "evaluation")  # where bugs live

Transform = Callable[[Recipe, float | None], Recipe]


@dataclass(frozen=True)
class Severity:
    """The valid range and canonical value of a variant's one knob."""

    canonical: float  # the benchmark's default: visible on digits in every seed
    low: float  # smallest valid value
    high: float  # largest valid value
    meaning: str  # what the number is, in a few words
    worse_when_higher: bool = True  # False where a smaller value is the worse fault

    def milder_to_worse(self, values: Sequence[float]) -> list[float]:
        """``values`` sorted from the mildest to the most severe."""
        return sorted(values, reverse=not self.worse_when_higher)

    def grid(self, n: int = 6) -> list[float]:
        """``n`` values spanning the valid range (log-spaced), canonical included, mild first."""
        if self.low > 0 and self.high / self.low > 20:
            values = np.geomspace(self.low, self.high, n)
        else:
            values = np.linspace(self.low, self.high, n)
        if float(self.high).is_integer() and float(self.low).is_integer():
            values = np.unique(np.round(values))
        points = {float(f"{v:.3g}") for v in values} | {self.canonical}
        return self.milder_to_worse(sorted(points))

    def check(self, fault: str, value: float) -> float:
        """Return ``value`` as a float, or raise if it is outside the range."""
        if not self.low <= value <= self.high:
            raise FaultbenchError(
                f"Severity {value:g} is out of range for fault '{fault}'; expected "
                f"{self.low:g} to {self.high:g} ({self.meaning}), canonical {self.canonical:g}"
            )
        return float(value)


def applies_anywhere(recipe: Recipe) -> str:
    """The usual variant applies to every recipe: no reason against it."""
    return ""


@dataclass(frozen=True)
class Variant:
    """One mechanism of a fault: where in a script the bug lives, and the bug itself."""

    name: str  # unique within its fault; a condition names it as "fault.variant"
    summary: str  # the bug in a user's terms, in one line
    lives: str  # the recipe parts it wraps, "+"-joined from PARTS ("" for a plug-in's)
    transform: Transform  # recipe -> recipe with the bug in it
    severity: Severity | None = None  # its knob; None: the bug has no natural degree
    why_not: Callable[[Recipe], str] = applies_anywhere  # why it cannot apply, "" if it can

    def __post_init__(self) -> None:
        unknown = [p for p in self.lives.split("+") if p and p not in PARTS]
        if unknown:
            raise ValueError(f"variant '{self.name}' lives in {unknown}; expected parts of {PARTS}")


@dataclass(frozen=True)
class Fault:
    """A registered fault: its label, what it breaks, and its mechanisms.

    Give either one ``transform`` (with its ``severity``), for a fault of one
    mechanism, or ``variants``; either way ``transform`` and ``severity`` end
    up those of the first variant, the fault's classic form.
    """

    name: str  # registry name, also the label a diagnoser should answer
    summary: str  # what is broken, in one line
    transform: Transform | None = None  # the first variant's transform
    severity: Severity | None = None  # the first variant's knob
    variants: tuple[Variant, ...] = ()  # every mechanism, the classic one first

    def __post_init__(self) -> None:
        if not self.variants:
            if self.transform is None:
                raise TypeError(f"fault '{self.name}' needs a transform or variants")
            only = Variant(DEFAULT_VARIANT, self.summary, "", self.transform, self.severity)
            object.__setattr__(self, "variants", (only,))
        elif self.transform is not None and self.transform is not self.variants[0].transform:
            raise TypeError(f"fault '{self.name}': give a transform or variants, not both")
        names = [v.name for v in self.variants]
        if len(set(names)) != len(names):
            raise ValueError(f"fault '{self.name}' names a variant twice: {names}")
        object.__setattr__(self, "transform", self.variants[0].transform)
        object.__setattr__(self, "severity", self.variants[0].severity)

    def variant(self, name: str) -> Variant:
        """The variant called ``name``.

        Raises:
            FaultbenchError: no such variant (with the nearest one).
        """
        for v in self.variants:
            if v.name == name:
                return v
        raise unknown_name(f"{self.name} variant", name, [v.name for v in self.variants])

    def variant_id(self, variant: Variant) -> str:
        """How a condition names ``variant``: the bare fault name for the classic one."""
        return self.name if variant is self.variants[0] else f"{self.name}.{variant.name}"

    @property
    def source_hash(self) -> str:
        """Hash of the code of every variant; part of the cache key of the runs it touches."""
        return code_hash([v.transform for v in self.variants])


def _plugin_fault(name: str, obj: object) -> Fault:
    """A plug-in's fault: a :class:`Fault` registered under its entry point's name."""
    if not isinstance(obj, Fault):
        raise TypeError(f"expected a faultbench Fault; got {type(obj).__name__}")
    if obj.name != name:
        raise TypeError(f"the entry point is named '{name}' but its Fault is '{obj.name}'")
    return obj


#: The known faults, by name: each name is a label a diagnoser may answer.
FAULTS: Registry[Fault] = Registry(
    "fault", builtin="faultbench.faults.known", group="faultbench.faults", adapt=_plugin_fault
)

#: Faults no diagnoser is told about: their runs' right answer is OTHER_FAULT.
HELD_OUT: Registry[Fault] = Registry(
    "held-out fault",
    builtin="faultbench.faults.heldout",
    group="faultbench.held_out_faults",
    adapt=_plugin_fault,
)


def register(name: str, summary: str, *variants: Variant, held_out: bool = False) -> Fault:
    """Register a fault of one or more variants (the first is its classic form).

    Raises:
        ValueError: the name is taken, in either registry.
    """
    other = FAULTS if held_out else HELD_OUT
    if name in other.names():
        raise ValueError(f"fault '{name}' is already registered as a {other.kind}")
    return (HELD_OUT if held_out else FAULTS).add(name, Fault(name, summary, variants=variants))


def get_fault(name: str) -> Fault:
    """The known or held-out fault called ``name``.

    Raises:
        FaultbenchError: neither registry holds it (with the nearest name of both).
    """
    if name in FAULTS.names() or name in FAULTS.broken:
        return FAULTS.get(name)
    if name in HELD_OUT.names() or name in HELD_OUT.broken:
        return HELD_OUT.get(name)
    raise unknown_name("fault", name, [*FAULTS.names(), *HELD_OUT.names()])


def find(ident: str) -> tuple[Fault, Variant]:
    """The fault and variant named by ``fault`` or ``fault.variant``.

    Raises:
        FaultbenchError: an unknown fault or variant.
    """
    name, _, variant = ident.partition(".")
    found = get_fault(name)
    return found, (found.variant(variant) if variant else found.variants[0])


@dataclass(frozen=True)
class Condition:
    """What is broken in a run: zero (healthy), one or several faults."""

    faults: tuple[tuple[str, float | None], ...] = ()  # (fault[.variant], severity), in order

    @property
    def name(self) -> str:
        """``healthy``, a fault (or ``fault.variant``) name, or several joined by ``+``."""
        return "+".join(ident for ident, _ in self.faults) or HEALTHY

    @property
    def label(self) -> str:
        """The truth a diagnoser is scored against: the faults' names, joined by ``+``."""
        return label_of(self.name)

    @property
    def labels(self) -> frozenset[str]:
        """The set of fault names a perfect diagnoser would name (held-out ones included)."""
        return frozenset(ident.partition(".")[0] for ident, _ in self.faults) or frozenset(
            {HEALTHY}
        )

    @property
    def held_out(self) -> bool:
        """Whether a held-out fault is involved: the right answer then is OTHER_FAULT."""
        return any(ident.partition(".")[0] in HELD_OUT.names() for ident, _ in self.faults)

    def apply(self, recipe: Recipe) -> Recipe:
        """Apply every fault, in order.

        Raises:
            FaultbenchError: a variant that cannot apply to ``recipe`` (with the reason).
        """
        applied, why = self._applied(recipe)
        if why:
            raise FaultbenchError(why)
        return applied

    def why_not(self, recipe: Recipe) -> str:
        """Why some fault of the condition cannot apply to ``recipe``, or "" when all can."""
        return self._applied(recipe)[1]

    def _applied(self, recipe: Recipe) -> tuple[Recipe, str]:
        for ident, severity in self.faults:
            found, variant = find(ident)
            why = recipe.inapplicable.get(found.name) or variant.why_not(recipe)
            if why:
                return recipe, f"fault variant '{ident}' does not apply here: {why}"
            recipe = variant.transform(recipe, severity)
        return recipe, ""

    def source_hash(self) -> str:
        """Hash of the code of every fault involved."""
        return "-".join(find(ident)[0].source_hash for ident, _ in self.faults)


def condition(*faults: str | tuple[str, float | None], task: Task | None = None) -> Condition:
    """Build a validated condition from names (canonical severity) or (name, severity).

    A name is a fault (its classic variant) or ``fault.variant``.
    ``condition()`` and ``condition("healthy")`` are the healthy condition.
    With ``task``, a variant that cannot apply to it is refused here, before any work.

    Raises:
        FaultbenchError: an unknown fault or variant, a severity out of range, the
            same fault twice, or a variant that does not apply to ``task``.
    """
    pairs: list[tuple[str, float | None]] = []
    for item in faults:
        ident, value = (item, None) if isinstance(item, str) else item
        if ident == HEALTHY:
            continue
        found, variant = find(ident)
        if task is not None and (why := inapplicable(ident, task)):
            raise FaultbenchError(f"fault variant '{ident}' does not apply to {task.name}: {why}")
        knob, severity = variant.severity, None
        if knob is not None:
            severity = knob.check(ident, knob.canonical if value is None else value)
        pairs.append((found.variant_id(variant), severity))
    names = [ident.partition(".")[0] for ident, _ in pairs]
    if len(set(names)) != len(names):
        raise FaultbenchError(f"a condition names the same fault twice: {names}")
    return Condition(tuple(pairs))


def condition_names() -> list[str]:
    """The classic grid's labels: ``healthy`` then every known fault."""
    return [HEALTHY, *FAULTS.names()]


def label_of(name: str) -> str:
    """The fault label of the condition called ``name``: its variants' names dropped."""
    return "+".join(part.partition(".")[0] for part in name.split("+"))


def answer_for(name: str) -> str:
    """The answer that is right for the condition called ``name``.

    A variant is scored under its fault's label (``frozen_layer.requires_grad``
    is right as ``frozen_layer``); a held-out fault, whose name no diagnoser is
    told, is right only as ``other_fault``.
    """
    parts = [part.partition(".")[0] for part in name.split("+")]
    if any(part in HELD_OUT.names() for part in parts):
        return OTHER_FAULT
    return "+".join(parts)


def labels() -> list[str]:
    """Every answer a diagnoser may give: ``healthy``, each known fault, ``other_fault``."""
    return [*condition_names(), OTHER_FAULT]


def canonical_conditions(
    names: Sequence[str] | None = None, *, task: Task | None = None
) -> list[Condition]:
    """One condition per label (the classic grid), each fault at its canonical severity.

    With ``task``, faults whose classic form cannot apply to it are left out: those
    the task declares inapplicable, and those whose first variant says why not
    (a language model's bug on a classifier's task). The report lists them with
    the reason (:func:`moot`), so nothing is skipped silently.
    """
    skip = moot(task) if task is not None else {}
    return [condition(name) for name in (names or condition_names()) if name not in skip]


def moot(task: Task) -> dict[str, str]:
    """Known fault -> why its classic form cannot apply to ``task`` (the task's own list
    included), for every fault that cannot."""
    return {name: why for name in FAULTS.names() if (why := inapplicable(name, task))}


def variant_ids(*, held_out: bool | None = None) -> list[str]:
    """How conditions name every variant: known faults' first, then held-out ones'.

    ``held_out=False`` gives the known faults' only, ``True`` the held-out ones'.
    """
    registries = {None: (FAULTS, HELD_OUT), False: (FAULTS,), True: (HELD_OUT,)}[held_out]
    return [
        fault.variant_id(v)
        for registry in registries
        for fault in map(registry.get, registry.names())
        for v in fault.variants
    ]


def inapplicable(ident: str, task: Task) -> str:
    """Why the variant ``ident`` cannot run on ``task``, or "" when it can."""
    found, variant = find(ident)
    recipe = base_setup(task, 0)
    return recipe.inapplicable.get(found.name) or variant.why_not(recipe)


def variant_conditions(task: Task) -> tuple[list[Condition], dict[str, str]]:
    """Every variant of every fault (held-out ones last) that applies to ``task``, each at
    its canonical severity, and the others with the reason they do not apply."""
    conditions, skipped = [], {}
    for ident in variant_ids():
        why = inapplicable(ident, task)
        if why:
            skipped[ident] = why
        else:
            conditions.append(condition(ident))
    return conditions, skipped
