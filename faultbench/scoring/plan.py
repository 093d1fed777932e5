"""Which runs an evaluation scores: every point of a grid, each on its seeds and base.

- The classic grid, a sweep or pairs (given conditions) run on the task's
  reference recipe, each point on seeds 0 to ``seeds - 1``.
- The full grid runs on drawn bases (:mod:`faultbench.storage.bases`):
  healthy on every seed 0 to ``healthy_seeds - 1`` (a false-alarm count needs
  many), and each fault point on the first ``seeds`` of those seeds whose
  base it can apply to. A variant that cannot apply to a base (dead ReLU units
  in a GELU network, SGD's momentum in an Adam run) passes that seed over,
  and the plan keeps each passed-over seed with the reason: never skipped silently.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from faultbench.faults.fault import Condition
from faultbench.faults.grid import GridPoint, grid_points
from faultbench.faults.recipe import base_setup
from faultbench.storage.bases import Base, verified_bases
from faultbench.storage.records import RunSpec
from faultbench.storage.store import Store
from faultbench.tasks.task import Task
from faultbench.training.engine import Engine
from faultbench.training.instruments import InstrumentRef

HEALTHY_SEEDS = 50  # the full grid's healthy runs per task: 0 false alarms bounds the rate < 0.08


@dataclass(frozen=True)
class Plan:
    """The runs of one evaluation, with the bases they were drawn on."""

    task: Task | None  # the task (None: a suite of no one task, the real bugs)
    runs: tuple[tuple[GridPoint, RunSpec], ...]  # every run, healthy first
    bases: dict[int, Base] = field(default_factory=dict)  # drawn bases by seed (full grid)
    passed_over: dict[str, tuple[tuple[int, str], ...]] = field(default_factory=dict)
    # variant -> (seed, why) of each base it could not apply to, before it had its seeds

    @property
    def specs(self) -> list[RunSpec]:
        """The runs' specs, in order."""
        return [spec for _, spec in self.runs]

    def with_instruments(self, refs: Sequence[InstrumentRef]) -> Plan:
        """The same runs, each trained with ``refs`` attached to its loop: what a diagnoser
        that declares instruments is scored on (other records than the plain runs')."""
        if not refs:
            return self
        runs = tuple((point, spec.with_instruments(tuple(refs))) for point, spec in self.runs)
        return replace(self, runs=runs)

    @property
    def grid(self) -> str:
        """The grid planned: full, classic or custom."""
        return self.runs[0][0].grid if self.runs else "custom"

    @property
    def redraws(self) -> int:
        """Drawn designs rejected (did not train healthy) before the bases were found."""
        return sum(base.redraws for base in self.bases.values())

    def short(self, seeds: int) -> dict[str, int]:
        """Variants that found fewer than ``seeds`` bases to apply to, and how many they found."""
        found: dict[str, int] = {}
        for point, _ in self.runs:
            if point.variant:
                name = f"{point.variant}@{point.level}"
                found[name] = found.get(name, 0) + 1
        return {name: n for name, n in found.items() if n < seeds}


def plan(
    task: Task,
    grid: str = "full",
    *,
    seeds: int = 5,
    healthy_seeds: int | None = None,
    conditions: Sequence[Condition] | None = None,
    faults: Sequence[str] | None = None,
    variants: Sequence[str] | None = None,
    levels: Sequence[str] | None = None,
    store: Store,
    engine: Engine | None = None,
    progress: bool | None = None,
) -> Plan:
    """The runs of ``grid`` on ``task`` (see the module's docstring).

    Planning the full grid trains the healthy runs that verify its bases
    (stored ones are read back).

    Raises:
        FaultbenchError: an unknown grid, fault, variant or level; a family whose
            draws do not train healthy.
    """
    if conditions:
        points = [GridPoint(c, c.name if c.faults else "", "", "custom") for c in conditions]
        return Plan(task, tuple(_on_reference(task, points, seeds)))
    points = grid_points(task, grid, faults=faults, variants=variants, levels=levels)
    if grid != "full":
        return Plan(task, tuple(_on_reference(task, points, seeds)))
    n_healthy = max(seeds, HEALTHY_SEEDS if healthy_seeds is None else healthy_seeds)
    bases = verified_bases(task, range(n_healthy), store=store, engine=engine, progress=progress)
    runs: list[tuple[GridPoint, RunSpec]] = []
    passed: dict[str, list[tuple[int, str]]] = {}
    for point in points:
        for base in _bases_for(task, point, list(bases.values()), seeds, passed):
            spec = RunSpec(task.name, task.fingerprint, point.condition, base.seed, base.design)
            runs.append((point, spec))
    return Plan(task, tuple(runs), bases, {k: tuple(v) for k, v in passed.items()})


def _on_reference(
    task: Task, points: Sequence[GridPoint], seeds: int
) -> list[tuple[GridPoint, RunSpec]]:
    return [
        (point, RunSpec(task.name, task.fingerprint, point.condition, seed))
        for point in points
        for seed in range(seeds)
    ]


def _bases_for(
    task: Task,
    point: GridPoint,
    pool: list[Base],
    seeds: int,
    passed: dict[str, list[tuple[int, str]]],
) -> list[Base]:
    """Every base for healthy; else the first ``seeds`` bases the point's variants apply to."""
    if not point.condition.faults:
        return pool
    chosen: list[Base] = []
    for base in pool:
        if len(chosen) == seeds:
            break
        why = point.condition.why_not(base_setup(task, base.seed, base.design))
        if not why:
            chosen.append(base)
        elif (base.seed, why) not in passed.setdefault(point.variant, []):
            passed[point.variant].append((base.seed, why))
    return chosen
