"""A suite: which runs exist, how each is trained, and what ``Run`` a diagnoser gets.

:func:`faultbench.scoring.evaluate.evaluate` scores a diagnoser on any suite the
same way (store check, stored answers, ``prepare``, a worker process or this one,
progress), so the grid and the real-bug suite are two adapters of this protocol:

- :class:`TaskSuite`: one grid of one task (full, classic or given conditions),
  planned by :mod:`faultbench.scoring.plan`, trained by faultbench's own loop
  (:func:`faultbench.storage.runner.ensure_records`), each trace read at a sampling;
- ``faultbench.realbugs.storage.RealBugSuite``: each case's faulty and fixed form,
  trained by its own script.

A third suite (a folder of a user's recorded runs) is another small adapter.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from faultbench.faults.family import measured
from faultbench.faults.fault import HEALTHY, Condition, moot
from faultbench.faults.grid import GridPoint
from faultbench.faults.levels import calibrated
from faultbench.scoring.contract import Diagnoser
from faultbench.scoring.plan import Plan, plan
from faultbench.scoring.run import Run
from faultbench.scoring.worker import TaskRuns
from faultbench.storage.records import RunRecord, RunSpec
from faultbench.storage.store import Store
from faultbench.tasks.task import Task
from faultbench.training.engine import Engine
from faultbench.training.monitor import DEFAULT_EVERY

MIN_HEALTHY_REFERENCE = 3  # healthy seeds trained for a grid that has none of its own

#: (spec, record, trained by this call) for each run, as the store hands them out.
Stored = tuple[RunSpec, RunRecord, bool]


@runtime_checkable
class Suite(Protocol):
    """What :func:`~faultbench.scoring.evaluate.evaluate` needs to know of a set of runs."""

    @property
    def name(self) -> str:
        """What reports call it: the task's name, or ``realbugs``."""
        ...

    @property
    def every(self) -> int:
        """The sampling each trace is read at (the Monitor's ``every``)."""
        ...

    @property
    def prefix(self) -> float:
        """The share of each run's steps a diagnoser reads (1.0: the whole run)."""
        ...

    def check(self, diagnoser: Diagnoser) -> None:
        """Refuse a diagnoser this suite cannot score (raise FaultbenchError), before work."""

    def tuned(self, diagnoser: Diagnoser) -> bool:
        """Whether ``diagnoser`` was tuned on this suite (its tuned-on vs held-out split)."""
        ...

    def plan(self, *, store: Store, engine: Engine | None, progress: bool | None) -> Plan:
        """Every run of the suite, with what it stands for."""
        ...

    def records(
        self,
        specs: Sequence[RunSpec],
        *,
        store: Store,
        engine: Engine | None,
        progress: bool | None,
    ) -> Iterable[Stored]:
        """Each run's record: stored ones read, missing ones trained and stored."""
        ...

    def runs(self) -> Callable[[RunRecord], Run]:
        """Builds the run a diagnoser is handed from a record (picklable: a worker gets it)."""
        ...

    def truth(self, point: GridPoint) -> str:
        """The label a perfect diagnoser answers on the runs of ``point``; '' when it is the
        condition's own (:func:`faultbench.faults.fault.answer_for`)."""
        ...

    def notes(self) -> list[str]:
        """Lines the user should read beside the scores."""
        ...

    def not_applicable(self) -> tuple[tuple[str, str], ...]:
        """(fault, why) of each fault the suite declares moot."""
        ...

    def healthy_reference(
        self, scored: Sequence[tuple[RunSpec, RunRecord]], *, store: Store, engine: Engine | None
    ) -> tuple[list[RunRecord], int] | None:
        """The healthy runs a faulty run is compared with (did its fault show?) and how many
        were trained for that; None when the suite has no such comparison."""
        ...


@dataclass(frozen=True)
class TaskSuite:
    """One grid of one task, each trace read as ``Monitor(every=every)`` records it."""

    task: Task  # the task
    grid: str = "full"  # full, classic (ignored when conditions are given)
    seeds: int = 5  # runs per fault point (see scoring.plan)
    conditions: tuple[Condition, ...] | None = None  # a custom grid on the reference recipe
    faults: tuple[str, ...] | None = None  # keep only these faults (healthy stays)
    variants: tuple[str, ...] | None = None  # keep only these variants
    levels: tuple[str, ...] | None = None  # keep only these levels
    healthy_seeds: int | None = None  # healthy drawn runs of the full grid
    every: int = DEFAULT_EVERY  # the sampling each trace is read at
    prefix: float = 1.0  # the share of each run's steps it is cut at (Trace.prefix)

    @property
    def name(self) -> str:
        """The task's name."""
        return self.task.name

    def check(self, diagnoser: Diagnoser) -> None:
        """Every diagnoser can be scored on a task's grid."""

    def tuned(self, diagnoser: Diagnoser) -> bool:
        """Whether the task is in the diagnoser's ``tuned_on``."""
        return self.task.name in diagnoser.tuned_on

    def plan(self, *, store: Store, engine: Engine | None, progress: bool | None) -> Plan:
        """The grid's runs (planning the full grid trains its bases' healthy runs)."""
        return plan(
            self.task,
            self.grid,
            seeds=self.seeds,
            healthy_seeds=self.healthy_seeds,
            conditions=self.conditions,
            faults=self.faults,
            variants=self.variants,
            levels=self.levels,
            store=store,
            engine=engine,
            progress=progress,
        )

    def records(
        self,
        specs: Sequence[RunSpec],
        *,
        store: Store,
        engine: Engine | None,
        progress: bool | None,
    ) -> Iterable[Stored]:
        """The store's own records (not copies: a diagnosis works on a copy of its own)."""
        from faultbench.storage.runner import ensure_records

        return ensure_records(
            specs, self.task, store=store, engine=engine, progress=progress, copy=False
        )

    def runs(self) -> Callable[[RunRecord], Run]:
        """:func:`~faultbench.scoring.harness.run_for` at this suite's sampling and prefix."""
        return TaskRuns(self.task, self.every, self.prefix)

    def truth(self, point: GridPoint) -> str:
        """'': the condition's own (a held-out fault's is ``other_fault``)."""
        return ""

    def notes(self) -> list[str]:
        """A line for a task whose family rates or severity levels no calibration measured."""
        missing = [
            what
            for what, done in (
                ("working rates", measured(self.task)),
                ("severity levels", calibrated(self.task)),
            )
            if not done
        ]
        if not missing:
            return []
        name = self.task.name
        return [
            f"task '{name}': its family's {' and '.join(missing)} are canonical, not measured "
            f"on it; to measure them, register it as a plug-in task (entry point group "
            f"faultbench.tasks) and run: faultbench calibrate --task {name}"
        ]

    def not_applicable(self) -> tuple[tuple[str, str], ...]:
        """The faults the task declares moot, and why."""
        return tuple(sorted(moot(self.task).items()))

    def healthy_reference(
        self, scored: Sequence[tuple[RunSpec, RunRecord]], *, store: Store, engine: Engine | None
    ) -> tuple[list[RunRecord], int]:
        """The grid's own healthy runs (on the full grid, every drawn base's), or, for a grid
        without any (a sweep, pairs), reference-recipe healthy seeds trained for the purpose."""
        from faultbench.storage.runner import ensure_records

        own = [record for spec, record in scored if spec.condition.name == HEALTHY]
        if own:
            return own, 0
        extra = [
            RunSpec(self.task.name, self.task.fingerprint, Condition(), s)
            for s in range(max(self.seeds, MIN_HEALTHY_REFERENCE))
        ]
        found, trained = [], 0
        for _, record, fresh in ensure_records(
            extra, self.task, store=store, engine=engine, copy=False
        ):
            trained += fresh
            found.append(record)
        return found, trained
