"""``faultbench calibrate``: choose each fault's mild, moderate and severe severity per task.

The rule, applied to measured runs only (no diagnoser is asked anything):

1. The calibration seeds :data:`SEEDS`, which no grid ever scores, draw their
   verified bases from the task's family (:mod:`faultbench.storage.bases`),
   whose healthy runs are the reference. For every known fault's variant with
   a knob, train its knob's sweep (:meth:`Severity.grid`, mildest first) on
   the first :data:`SWEEP_BASES` of those bases the variant applies to (a
   variant that applies to few designs looks further, among
   :data:`SEARCH_SEEDS`): a severity's effect is measured over several drawn
   designs, so "mild" means one thing across the family.
2. A severity is *visible* when the manifestation check
   (:func:`faultbench.scoring.manifest.manifestation`) finds its run outside the
   healthy spread in most swept bases (:data:`VISIBLE_SHARE`: a design can mask a fault,
   as a normalization layer masks huge inputs). Its *effect* is the median over those
   bases of :func:`~faultbench.scoring.manifest.effect`: how many healthy
   standard deviations the run moved its most-moved signal, rounded to
   :data:`EFFECT_DIGITS` significant digits before any comparison, so that a
   last-bit difference in training cannot move a level.
3. *mild* is the mildest visible severity; *severe* the mildest whose effect
   is within 5% of the largest effect of the sweep (where the fault saturates);
   *moderate* the visible severity between them whose log-effect lies nearest
   the middle of theirs, among those at least :data:`STEP` times mild's effect
   and at most severe's divided by :data:`STEP` (so the effect grows from level
   to level with a margin). Without such a severity there is no moderate; when
   severe is not :data:`STEP` times mild (the mildest visible one already
   saturates), there is only severe. A knob with no visible severity on a task
   gets the ``hidden`` row below.

Because effect is measured in units of the task's own healthy spread, "mild"
means the same distance from healthy on digits as on the CNN task.

A variant without a knob (the bug has no degree) is measured the same way on
its first :data:`SWEEP_BASES` bases and written as level ``fixed`` (severity
NaN) when it shows on most of them. A variant that shows on fewer than most of
its bases even at its strongest, or applies to none, gets one row of level
``hidden`` instead (its strongest point): the task's designs mask it (a
normalization, clipping, an adaptive optimizer), and the full grid leaves it
out of that task, saying so, rather than score diagnosers on runs that look
healthy. Which variants show on which task is then versioned data, which a
test reads for every variant of every task.

Each level records the code it was measured on (:func:`measured_on`): the
task's data, the training code, the variant's own code, the family's rates
and this rule. ``make report`` reads the levels and never recalibrates;
``make calibrate`` measures them again, and a test fails while a level was
measured on other code.
"""

from __future__ import annotations

import hashlib
import inspect
import math
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from faultbench.core.codetext import code_text
from faultbench.faults.family import working_rates
from faultbench.faults.fault import Condition, condition, find, inapplicable, variant_ids
from faultbench.faults.levels import FIXED, HIDDEN, LEVELS, Level
from faultbench.faults.recipe import base_setup
from faultbench.faults.source import code_hash
from faultbench.scoring import manifest
from faultbench.scoring.manifest import EFFECT_CAP, effect, manifestation
from faultbench.scoring.plan import HEALTHY_SEEDS
from faultbench.storage.bases import Base, verified_bases
from faultbench.storage.records import RunRecord, RunSpec, code_version
from faultbench.storage.runner import ensure_records
from faultbench.storage.store import Store
from faultbench.tasks.task import Task
from faultbench.training.engine import Engine
from faultbench.training.trace import RunConfig, Trace

SEEDS = tuple(range(1000, 1010))  # calibration seeds: disjoint from every scored grid's 0..n-1
SWEEP_BASES = 3  # the drawn bases each variant's sweep runs on
# Where a variant that applies to few designs (dead ReLUs: a ReLU network without a
# normalization) looks for its sweep bases: as many draws as the grid's healthy seeds,
# so a variant the grid can place is swept too; verified a batch at a time, when needed.
SEARCH_SEEDS = tuple(range(1000, 1000 + HEALTHY_SEEDS))
SEARCH_BATCH = 10
VISIBLE_SHARE = 2 / 3  # a severity counts as visible when most swept bases show it
EFFECT_DIGITS = 2  # significant digits effects are compared at
STEP = 1.2  # each level moves the signal at least 1.2x as far as the level below it
SATURATED = 0.95  # "severe": the mildest severity within 5% of the sweep's largest effect


@dataclass(frozen=True)
class SweepPoint:
    """One severity of one variant, measured on the calibration seeds."""

    variant: str  # ``fault.variant``
    severity: float  # the knob's value
    visible_share: float  # share of seeds outside the healthy spread
    effect: float  # median over seeds of the largest |z| of any signal


def knob_variants(task: Task) -> list[str]:
    """The known faults' variants with a knob that apply to ``task``."""
    return [
        ident
        for ident in variant_ids(held_out=False)
        if find(ident)[1].severity is not None and not inapplicable(ident, task)
    ]


def fixed_variants(task: Task) -> list[str]:
    """The known faults' variants without a knob that apply to ``task``."""
    return [
        ident
        for ident in variant_ids(held_out=False)
        if find(ident)[1].severity is None and not inapplicable(ident, task)
    ]


def choose_levels(points: Sequence[SweepPoint]) -> dict[str, SweepPoint]:
    """Level -> sweep point by the rule of this module (``points`` mildest first)."""
    visible = [p for p in points if p.visible_share >= VISIBLE_SHARE]
    if not visible:
        return {}
    mild, top = visible[0], max(p.effect for p in visible)
    severe = next(p for p in visible if p.effect >= SATURATED * top)
    if severe is mild or severe.effect < STEP * mild.effect:
        return {"severe": severe}
    between = visible[visible.index(mild) + 1 : visible.index(severe)]
    inner = [p for p in between if STEP * mild.effect <= p.effect <= severe.effect / STEP]
    chosen = {"mild": mild, "severe": severe}
    if inner:
        middle = (math.log(mild.effect) + math.log(severe.effect)) / 2
        chosen["moderate"] = min(inner, key=lambda p: abs(math.log(p.effect) - middle))
    return {name: chosen[name] for name in LEVELS if name in chosen}


def calibrate(
    task: Task,
    *,
    store: Store,
    engine: Engine | None = None,
    variants: Sequence[str] | None = None,
    progress: bool | None = None,
    emit: Callable[[str], None] | None = None,
) -> tuple[list[Level], list[SweepPoint]]:
    """The levels of every knob variant on ``task``, and the sweep they came from.

    Runs are stored like every other (a second calibration trains nothing).
    """
    idents = list(variants) if variants is not None else knob_variants(task)
    idents += fixed_variants(task) if variants is None else []
    bases = verified_bases(task, SEEDS, store=store, engine=engine, progress=progress)
    on = _sweep_bases(task, idents, bases, store=store, engine=engine, progress=progress)
    sweeps: dict[str, list[tuple[Condition, list[Base]]]] = {}
    for ident in idents:
        knob = find(ident)[1].severity
        conds = [condition((ident, value)) for value in knob.grid()] if knob else [condition(ident)]
        sweeps[ident] = [(cond, on[ident]) for cond in conds]
    specs = [_spec(task, Condition(), base) for base in bases.values()]
    specs += [_spec(task, cond, b) for points in sweeps.values() for cond, on in points for b in on]
    records = {
        spec: record
        for spec, record, _ in ensure_records(
            specs, task, store=store, engine=engine, progress=progress, copy=False
        )
    }
    found = [_signals_of(records[spec]) for spec in specs[: len(bases)]]
    healthy = [h for h in found if h is not None]
    levels, sweep = [], []
    for ident, points in sweeps.items():
        measured = [_measure(task, cond, on, records, healthy) for cond, on in points]
        sweep += measured
        seeds = " ".join(str(b.seed) for b in points[0][1]) if points else ""
        code = measured_on(task, ident)
        chosen = _levels_of(measured, fixed=find(ident)[1].severity is None)
        for name, point in chosen.items():
            levels.append(
                Level(
                    task.name,
                    ident,
                    name,
                    point.severity,
                    point.effect,
                    point.visible_share,
                    seeds,
                    code,
                )
            )
        if emit:
            n = len(points[0][1])
            said = ", ".join(
                f"{name} {point.severity:g}"
                if name in LEVELS
                else f"{name}, visible on {point.visible_share:.0%} of its {n} bases"
                for name, point in chosen.items()
            )
            emit(f"{task.name} {ident}: {said}")
    return levels, sweep


def _levels_of(measured: Sequence[SweepPoint], *, fixed: bool) -> dict[str, SweepPoint]:
    """A variant's rows: its levels, or its one form (``fixed``), each visible on most of
    its bases; else one ``hidden`` row, its strongest point, which the full grid leaves out."""
    if fixed and measured[0].visible_share >= VISIBLE_SHARE:
        return {FIXED: measured[0]}
    if not fixed and (chosen := choose_levels(measured)):
        return chosen
    return {HIDDEN: max(measured, key=lambda p: (p.visible_share, p.effect))}


def _sweep_bases(
    task: Task,
    idents: Sequence[str],
    bases: dict[int, Base],
    *,
    store: Store,
    engine: Engine | None,
    progress: bool | None,
) -> dict[str, list[Base]]:
    """Each variant's first :data:`SWEEP_BASES` bases it applies to, among the calibration
    bases, then among :data:`SEARCH_SEEDS` (verified only as far as a variant needs them);
    fewer where the search finds fewer (none: the variant shows on no base)."""
    pool = dict(bases)

    def applicable(ident: str) -> list[Base]:
        variant = condition(ident)  # applicability is the same at every severity
        found = [
            b for b in pool.values() if not variant.why_not(base_setup(task, b.seed, b.design))
        ]
        return found[:SWEEP_BASES]

    searched = len(SEEDS)
    while searched < len(SEARCH_SEEDS) and any(
        len(applicable(ident)) < SWEEP_BASES for ident in idents
    ):
        more = SEARCH_SEEDS[searched : searched + SEARCH_BATCH]
        pool |= verified_bases(task, more, store=store, engine=engine, progress=progress)
        searched += len(more)
    return {ident: applicable(ident) for ident in idents}


def measured_on(task: Task, ident: str) -> str:
    """A hash of everything a level of ``ident`` on ``task`` depends on: the task's data,
    the training code, the variant's code and where it applies (which bases it is swept
    on), the family's working rates, the rule itself."""
    rates = sorted((name, lr) for name, lr in working_rates(task).items())
    fault, variant = find(ident)
    parts = [task.fingerprint, code_version(), fault.source_hash, code_hash([variant.why_not])]
    parts += [repr(rates)]
    parts += [code_text(inspect.getsource(module)) for module in (sys.modules[__name__], manifest)]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:12]


def _spec(task: Task, cond: Condition, base: Base) -> RunSpec:
    return RunSpec(task.name, task.fingerprint, cond, base.seed, base.design)


Measured = tuple[Trace, RunConfig]  # what the manifestation check and the effect read


def _signals_of(record: RunRecord) -> Measured | None:
    if record.ok and record.trace is not None and record.config is not None:
        return record.trace, record.config
    return None


def _measure(
    task: Task,
    cond: Condition,
    on: list[Base],
    records: dict[RunSpec, RunRecord],
    healthy: list[Measured],
) -> SweepPoint:
    ((ident, knob),) = cond.faults
    severity = math.nan if knob is None else knob  # a fixed variant has no degree
    visible, effects = [], []
    for base in on:
        run = _signals_of(records[_spec(task, cond, base)])
        if run is None:  # a run that failed to train (it crashed) is off the scale
            visible.append(True)
            effects.append(EFFECT_CAP)
            continue
        trace, config = run
        visible.append(bool(manifestation(trace, config, healthy).visible))
        effects.append(effect(trace, config, healthy))
    if not on:  # no drawn base the variant applies to: nothing visible
        return SweepPoint(ident, severity, 0.0, 0.0)
    median = effect_at_precision(float(np.median(effects)))
    return SweepPoint(ident, severity, float(np.mean(visible)), median)


def effect_at_precision(value: float) -> float:
    """``value`` rounded to :data:`EFFECT_DIGITS` significant digits, as levels compare it."""
    return float(f"{value:.{EFFECT_DIGITS}g}")
