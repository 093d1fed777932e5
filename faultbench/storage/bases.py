"""Verified bases: the drawn design each seed of a task trains on, known to train healthy.

A drawn design (:func:`faultbench.faults.family.draw_design`) becomes a seed's
base only if its healthy run trains well by :data:`CRITERION`: every loss
finite, the loss of the run's last tenth below :data:`LOSS_FALL` times that of
its first tenth, and a final validation accuracy of at least
:data:`VAL_SHARE` times the task's reference recipe's (the median over the
reference's healthy runs on seeds 0 to :data:`REFERENCE_SEEDS` - 1, which the
classic grid scores too). A design that fails is redrawn from the next
sub-seed, deterministically; the redraws and their reasons are counted and
reported, never hidden. The healthy run that verified a base is the healthy
run the grid scores on that seed.

A healthy run is also not data-bound (:data:`NOT_DATA_BOUND`): it waits for its batches
less than :data:`DATA_BOUND` of its step time. That is a property of the family's
loaders (:mod:`faultbench.faults.batches`), measured on their healthy drawn runs
(docs/faults.md) and held by a test, not a reason to redraw: a wait is wall-clock time,
which a busy machine stretches, and a base must be the same draw on every machine.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from faultbench.core.errors import FaultbenchError
from faultbench.faults.family import draw_design
from faultbench.faults.fault import Condition
from faultbench.storage.records import RunRecord, RunSpec
from faultbench.storage.runner import ensure_records
from faultbench.storage.store import Store
from faultbench.tasks.design import Design
from faultbench.tasks.task import Task
from faultbench.training.engine import Engine
from faultbench.training.trace import Trace

VAL_SHARE = 0.9  # a base validates at least this share of the reference recipe's accuracy
LOSS_FALL = 0.8  # and its loss ends below this share of where it started
REFERENCE_SEEDS = 5  # the reference recipe's healthy runs the share is taken of
MAX_ATTEMPTS = 20  # draws per seed before the family is declared broken
CRITERION = (
    f"finite loss; last tenth's mean loss < {LOSS_FALL} x the first tenth's; final validation "
    f"accuracy >= {VAL_SHARE} x the reference recipe's (median of its seeds "
    f"0-{REFERENCE_SEEDS - 1})"
)

#: A run waiting for data a third of its step time or more (as long as half its compute)
#: is data-bound: the starved loader's mildest level waits 0.2 of its compute (a share of
#: 0.17), its canonical one 5x (0.83); the family's loaders wait well under a tenth.
DATA_BOUND = 1 / 3
NOT_DATA_BOUND = (
    f"data wait < {DATA_BOUND:.2f} of the step time (the Monitor's wait share: under half "
    "the compute); held by every loader of the family, not a redraw criterion (wall clock)"
)


@dataclass(frozen=True)
class Base:
    """The verified design of one seed, and what was redrawn before it."""

    seed: int  # the run's seed
    design: Design  # the first draw of this seed that trains healthy
    rejected: tuple[str, ...] = ()  # why each earlier draw (attempt 0, 1, ...) failed

    @property
    def redraws(self) -> int:
        """Draws rejected before this one."""
        return len(self.rejected)


def healthy_verdict(record: RunRecord, reference_acc: float) -> str:
    """Why the healthy run ``record`` is not healthy by :data:`CRITERION`, or "" when it is."""
    if not record.ok or record.trace is None:
        return f"training failed: {record.error.splitlines()[0] if record.error else '?'}"
    return trace_verdict(record.trace, reference_acc)


def trace_verdict(trace: Trace, reference: float) -> str:
    """Why a trace is not healthy by :data:`CRITERION` against ``reference`` (the task
    metric a reasonable model reaches on the same data), or "" when it is.

    The one healthy bar of the benchmark: a drawn base of the grid passes it against its
    task's reference recipe, a real bug's fixed twin against its case's stated reference
    (:mod:`faultbench.realbugs`). The metric read is the last evaluation's ``val_acc``.
    """
    loss = trace.loss
    if not np.all(np.isfinite(loss)):
        return "a loss is not finite"
    tenth = max(1, len(loss) // 10)
    first, last = float(loss[:tenth].mean()), float(loss[-tenth:].mean())
    if not last < LOSS_FALL * first:
        return f"the loss did not fall ({first:.3f} -> {last:.3f})"
    val = float(trace.val_acc[-1]) if len(trace.val_acc) else math.nan
    if not val >= VAL_SHARE * reference:
        return f"validation accuracy {val:.3f} < {VAL_SHARE} x reference {reference:.3f}"
    return ""


def data_bound_verdict(trace: Trace) -> str:
    """Why ``trace`` is data-bound by :data:`NOT_DATA_BOUND`, or "" when it is not."""
    share = trace.wait_share
    if share >= DATA_BOUND:
        return f"data-bound: it waits {share:.2f} of its step time (bound {DATA_BOUND:.2f})"
    return ""


def reference_accuracy(
    task: Task, *, store: Store, engine: Engine | None = None, progress: bool | None = None
) -> float:
    """The median final validation accuracy of the reference recipe's healthy runs."""
    specs = [RunSpec(task.name, task.fingerprint, Condition(), s) for s in range(REFERENCE_SEEDS)]
    accs = [
        float(record.trace.val_acc[-1])
        for _, record, _ in ensure_records(
            specs, task, store=store, engine=engine, progress=progress, copy=False
        )
        if record.ok and record.trace is not None and len(record.trace.val_acc)
    ]
    if not accs:
        raise FaultbenchError(
            f"task '{task.name}': no healthy run of its reference recipe trained; expected the "
            "reference to train before drawn designs can be compared with it"
        )
    return statistics.median(accs)


def verified_bases(
    task: Task,
    seeds: Sequence[int],
    *,
    store: Store,
    engine: Engine | None = None,
    progress: bool | None = None,
) -> dict[int, Base]:
    """Seed -> its verified base, drawing again where a draw does not train healthy.

    Every round trains the healthy runs of the draws still pending, all at once
    (stored ones are read back), so a warm call trains nothing.

    Raises:
        FaultbenchError: a seed whose :data:`MAX_ATTEMPTS` draws all fail (the
            family, or its working rates, are broken for this task).
    """
    reference = reference_accuracy(task, store=store, engine=engine, progress=progress)
    attempt = dict.fromkeys(seeds, 0)
    rejected: dict[int, list[str]] = {s: [] for s in seeds}
    found: dict[int, Base] = {}
    while attempt:
        specs = {
            seed: RunSpec(
                task.name, task.fingerprint, Condition(), seed, draw_design(task, seed, a)
            )
            for seed, a in attempt.items()
        }
        records = {
            spec: record
            for spec, record, _ in ensure_records(
                list(specs.values()),
                task,
                store=store,
                engine=engine,
                progress=progress,
                copy=False,
            )
        }
        for seed, spec in specs.items():
            why = healthy_verdict(records[spec], reference)
            if not why:
                assert spec.design is not None
                found[seed] = Base(seed, spec.design, tuple(rejected.pop(seed)))
                del attempt[seed]
                continue
            rejected[seed].append(why)
            attempt[seed] += 1
            if attempt[seed] >= MAX_ATTEMPTS:
                raise FaultbenchError(
                    f"task '{task.name}' seed {seed}: {MAX_ATTEMPTS} drawn designs in a row did "
                    f"not train healthy (last: {why}); expected a family whose designs train, "
                    "e.g. measured working rates (faultbench calibrate)"
                )
    return {seed: found[seed] for seed in seeds}
