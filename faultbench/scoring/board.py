"""The leaderboard's runs: every suite a diagnoser is scored on for its result file.

A :class:`Board` names them: each task's classic grid (the reference recipe) and
full grid (drawn bases), the full grid read at the Monitor's default sampling and
at every step, the full grid at the default sampling cut at 10%, 25% and 50% of each
run's steps (how early a diagnoser knows), and the real-bug suite. ``make report``'s
board is :meth:`Board.default` (its full size: 5 classic seeds, 2 runs per fault cell,
50 healthy drawn runs per task); ``faultbench score`` and ``faultbench leaderboard``
take the same options, so a smaller board (a test's) is scored and assembled the same
way. A diagnoser that declares ``subset_seeds`` is scored on the first seeds only
(:meth:`Board.seeds_for`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # this module stays light: the CLI's --help reads its defaults
    from faultbench.scoring.contract import Contract

CLASSIC_SEEDS = 5  # seeds per condition of the classic grid
# The full grid's runs per fault cell, each on its own drawn base. Two keep a cold `make
# report` within its 45 minutes on 2 cores: with three it took 50 (training alone 35), and
# five, as the classic grid has, had trained only half the tasks at 20.
FAULT_SEEDS = 2
HEALTHY_SEEDS = 50  # faultbench.scoring.plan.HEALTHY_SEEDS: healthy drawn runs per task
SUBSET_HEALTHY = 10  # healthy drawn runs per task for a diagnoser scored on a subset of seeds
# One that declares subset_full_grid = "healthy" (TrainCheck: each run traced again, 30-130 s
# on 2 cores) is scored on what 2 cores trace in about two hours: the classic grid's first
# seeds (its identification), this many healthy drawn runs per task (its false alarms) and
# the real-bug suite (about 350 runs).
SUBSET_HEALTHY_ONLY = 5
HEALTHY_ONLY = ("healthy",)  # a full grid's selection of its healthy drawn runs alone
GRIDS = ("classic", "full")
REALBUGS = "realbugs"  # the real-bug suite's name (faultbench.realbugs.SUITE)
DEFAULT_EVERY = 20  # faultbench.training.monitor.DEFAULT_EVERY (a test holds them equal)
#: faultbench.training.trace.PREFIXES (a test holds them equal): the shares of each run of
#: the full grid, at the default sampling, every diagnoser is also scored on.
PREFIXES = (0.1, 0.25, 0.5)


@dataclass(frozen=True)
class Evaluation:
    """One evaluation of a board: what :func:`faultbench.scoring.evaluate.evaluate` is asked
    (the real-bug suite: task ``realbugs``, grid ``realbugs``)."""

    diagnoser: str  # a registered name or module:Class
    task: str  # a task's name, or "realbugs"
    grid: str  # "classic", "full" or "realbugs"
    seeds: int  # runs per fault point
    every: int = DEFAULT_EVERY  # the sampling the traces are read at
    healthy_seeds: int | None = None  # the full grid's healthy runs (None: the default)
    faults: tuple[str, ...] | None = None  # keep only these faults (None: all)
    prefix: float = 1.0  # the share of each run's steps read (1.0: the whole run)


@dataclass(frozen=True)
class Board:
    """Which runs the leaderboard shows."""

    tasks: tuple[str, ...]  # the tasks whose classic grid is scored
    full_tasks: tuple[str, ...]  # the tasks whose full grid is scored (the headline)
    classic_seeds: int = CLASSIC_SEEDS  # seeds per condition of the classic grid
    fault_seeds: int = FAULT_SEEDS  # runs per fault cell of the full grid
    healthy_seeds: int = HEALTHY_SEEDS  # healthy drawn runs per task of the full grid
    every_step: bool = True  # the full grid read at every step too (diagnosers that read it)
    cases: tuple[str, ...] | None = None  # real-bug cases (None: every case; (): none)
    faults: tuple[str, ...] | None = None  # keep only these faults (None: all; a test's board)
    prefixes: tuple[float, ...] = PREFIXES  # the full grid also read cut at these shares
    notes: tuple[str, ...] = field(default=(), compare=False)  # nothing a result depends on

    @classmethod
    def default(cls, tasks: Sequence[str] | None = None) -> Board:
        """``make report``'s board on ``tasks`` (every registered task when None)."""
        from faultbench.tasks.task import task_names

        chosen = tuple(tasks or task_names())
        return cls(chosen, chosen)

    def seeds_for(self, contract: Contract, grid: str) -> int:
        """Runs per fault point of ``grid`` for a diagnoser: all, or its ``subset_seeds``."""
        seeds = self.classic_seeds if grid == "classic" else self.fault_seeds
        subset = contract.subset_seeds
        return min(seeds, subset) if subset is not None else seeds

    def healthy_for(self, contract: Contract) -> int:
        """Healthy drawn runs per task: all, or :data:`SUBSET_HEALTHY` of them for a diagnoser
        scored on a subset of seeds (a false-alarm rate needs many more runs than a cell)."""
        if contract.subset_seeds is None:
            return self.healthy_seeds
        limit = SUBSET_HEALTHY_ONLY if contract.subset_full_grid == "healthy" else SUBSET_HEALTHY
        return min(self.healthy_seeds, limit)

    def subset_text(self, contract: Contract) -> str:
        """What part of the board a diagnoser is scored on, in words ('': all of it)."""
        if contract.subset_seeds is None:
            return ""
        seeds = self.seeds_for(contract, "classic")
        first = "seed 0" if seeds == 1 else f"seeds 0-{seeds - 1}"
        healthy = self.healthy_for(contract)
        if contract.subset_full_grid == "healthy":
            suite = "" if self.cases == () else " and the real-bug suite"
            return (
                f"{first} of the classic grid (its identification), {healthy} healthy drawn "
                f"runs per task (its false alarms){suite}"
            )
        return f"{first} of both grids, {healthy} healthy drawn runs (seconds per diagnosis)"

    def evaluations(self, name: str, contract: Contract) -> list[Evaluation]:
        """Every evaluation of diagnoser ``name`` (declaring ``contract``) on this board."""
        found = [
            Evaluation(name, task, "classic", self.seeds_for(contract, "classic"))
            for task in self.tasks
        ]
        samplings = (DEFAULT_EVERY, 1) if self.every_step and contract.reads_trace else ()
        subset = contract.subset_seeds is not None and contract.subset_full_grid == "healthy"
        for every in samplings or (DEFAULT_EVERY,):
            found += [
                Evaluation(
                    name,
                    task,
                    "full",
                    self.seeds_for(contract, "full"),
                    every,
                    self.healthy_for(contract),
                    faults=HEALTHY_ONLY if subset else self.faults,
                )
                for task in self.full_tasks
            ]
        found += [  # how early it knows: the full grid at the default sampling, cut
            Evaluation(
                name,
                task,
                "full",
                self.seeds_for(contract, "full"),
                DEFAULT_EVERY,
                self.healthy_for(contract),
                faults=self.faults,
                prefix=prefix,
            )
            for prefix in self.prefixes_for(contract)
            for task in self.full_tasks
        ]
        found = [replace(ev, faults=self.faults) if ev.grid == "classic" else ev for ev in found]
        if self.cases != ():
            found.append(Evaluation(name, REALBUGS, REALBUGS, 1))
        return found

    def prefixes_for(self, contract: Contract) -> tuple[float, ...]:
        """The shares each full-grid run is also read at: none for a subset diagnoser (its
        full grid is healthy runs alone, and how early it knows needs faults)."""
        healthy_only = contract.subset_seeds is not None and contract.subset_full_grid == "healthy"
        return () if healthy_only else self.prefixes

    def to_dict(self, contract: Contract) -> dict[str, Any]:
        """What a result file was scored on (compared with the leaderboard's board)."""
        return {
            "tasks": list(self.tasks),
            "full_tasks": list(self.full_tasks),
            "classic_seeds": self.seeds_for(contract, "classic"),
            "fault_seeds": self.seeds_for(contract, "full"),
            "healthy_seeds": self.healthy_for(contract),
            "every_step": self.every_step and contract.reads_trace,
            "cases": None if self.cases is None else list(self.cases),
            "faults": None if self.faults is None else list(self.faults),
            "prefixes": list(self.prefixes_for(contract)),
        }
