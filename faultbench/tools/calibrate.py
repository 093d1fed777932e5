"""``faultbench calibrate``: choose each fault's mild, moderate and severe severity per task.

The rule, applied to measured runs only (no diagnoser is asked anything):

1. For every known fault's variant with a knob that applies to the task,
   train its knob's sweep (:meth:`Severity.grid`, mildest first) on the
   calibration seeds :data:`SEEDS`, which no grid ever scores, beside healthy
   runs of the same seeds.
2. A severity is *visible* when the manifestation check
   (:func:`faultbench.scoring.manifest.manifestation`) finds its run outside the
   healthy spread in every calibration seed. Its *effect* is the median over
   seeds of :func:`~faultbench.scoring.manifest.effect`: how many healthy
   standard deviations the run moved its most-moved signal.
3. *mild* is the mildest visible severity; *severe* the mildest whose effect
   is within 5% of the largest effect of the sweep (where the fault saturates);
   *moderate* the visible severity between them whose log-effect lies nearest
   the middle of theirs, among those at least :data:`STEP` times mild's effect
   and at most severe's divided by :data:`STEP` (so the effect grows from level
   to level with a margin). Without such a severity there is no moderate; when
   severe is not :data:`STEP` times mild (the mildest visible one already
   saturates), there is only severe. A knob with no visible severity on a task
   gets no level there (the full grid then runs it at its canonical severity,
   marked ``canonical``).

Because effect is measured in units of the task's own healthy spread, "mild"
means the same distance from healthy on digits as on the CNN task.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from faultbench.faults.fault import Condition, condition, find, inapplicable, variant_ids
from faultbench.faults.levels import LEVELS, Level
from faultbench.scoring.manifest import EFFECT_CAP, effect, manifestation
from faultbench.storage.records import RunRecord, RunSpec
from faultbench.storage.runner import ensure_records
from faultbench.storage.store import Store
from faultbench.tasks.task import Task
from faultbench.training.engine import Engine
from faultbench.training.trace import RunConfig, Trace

SEEDS = (1000, 1001, 1002)  # calibration seeds: disjoint from every scored grid's 0..n-1
VISIBLE_SHARE = 1.0  # a severity counts as visible only if every calibration seed shows it
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
    sweeps: dict[str, list[Condition]] = {}
    for ident in idents:
        knob = find(ident)[1].severity
        assert knob is not None
        sweeps[ident] = [condition((ident, value)) for value in knob.grid()]
    specs = [RunSpec(task.name, task.fingerprint, Condition(), s) for s in SEEDS]
    specs += [
        RunSpec(task.name, task.fingerprint, cond, s)
        for conds in sweeps.values()
        for cond in conds
        for s in SEEDS
    ]
    records = {
        spec: record
        for spec, record, _ in ensure_records(
            specs, task, store=store, engine=engine, progress=progress, copy=False
        )
    }
    found = [_signals_of(records[spec]) for spec in specs[: len(SEEDS)]]
    healthy = [h for h in found if h is not None]
    levels, sweep = [], []
    for ident, conds in sweeps.items():
        points = [_measure(ident, cond, task, records, healthy) for cond in conds]
        sweep += points
        for name, point in choose_levels(points).items():
            levels.append(
                Level(
                    task.name,
                    ident,
                    name,
                    point.severity,
                    point.effect,
                    point.visible_share,
                    " ".join(map(str, SEEDS)),
                )
            )
        if emit:
            chosen = ", ".join(
                f"{lv.level} {lv.severity:g}" for lv in levels if lv.variant == ident
            )
            emit(f"{task.name} {ident}: {chosen or 'no visible severity'}")
    return levels, sweep


Measured = tuple[Trace, RunConfig]  # what the manifestation check and the effect read


def _signals_of(record: RunRecord) -> Measured | None:
    if record.ok and record.trace is not None and record.config is not None:
        return record.trace, record.config
    return None


def _measure(
    ident: str,
    cond: Condition,
    task: Task,
    records: dict[RunSpec, RunRecord],
    healthy: list[Measured],
) -> SweepPoint:
    severity = cond.faults[0][1]
    assert severity is not None
    visible, effects = [], []
    for seed in SEEDS:
        run = _signals_of(records[RunSpec(task.name, task.fingerprint, cond, seed)])
        if run is None:  # a run that failed to train (it crashed) is off the scale
            visible.append(True)
            effects.append(EFFECT_CAP)
            continue
        trace, config = run
        visible.append(bool(manifestation(trace, config, healthy).visible))
        effects.append(effect(trace, config, healthy))
    return SweepPoint(ident, severity, float(np.mean(visible)), float(np.median(effects)))
