"""The working rate of each optimizer on each task, measured by a sweep.

A family draws its designs' optimizers at their working rates on the task
(:mod:`faultbench.faults.family`). The sweep trains the task's reference
network with each optimizer at every rate of :data:`RATES`, on the
calibration seeds (which no grid scores), and records every point in
``faultbench/faults/rates.csv``. An optimizer's working rate is the lowest
rate whose median validation accuracy is within :data:`TOLERANCE` of its
best: the rate at which the task is already learned nearly as well as it can
be. On these small networks accuracy stays near its best over two or three
decades of rates (Adam still reaches 0.94 on digits at 1.0), so the best rate
itself sits wherever the seeds' noise puts it, often near the top of that
range, where a deeper or unnormalized drawn design diverges; the lowest
good rate is stable, and it is where practitioners' defaults are (Adam at
1e-3). Only healthy runs are trained; no diagnoser is asked anything.
"""

from __future__ import annotations

import hashlib
import inspect
import statistics
import sys
from collections.abc import Callable

from faultbench.core.codetext import code_text
from faultbench.faults.family import RatePoint
from faultbench.faults.fault import Condition
from faultbench.storage.records import RunSpec, code_version
from faultbench.storage.runner import ensure_records
from faultbench.storage.store import Store
from faultbench.tasks.task import Task
from faultbench.training.engine import Engine

SEEDS = (1000, 1001, 1002)  # the calibration seeds, which no grid scores
RATES = (1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 1e-1, 3e-1, 1.0)  # every optimizer's sweep
TOLERANCE = 0.02  # a rate "works" within two points of the best median validation accuracy


def sweep_rates(
    task: Task,
    *,
    store: Store,
    engine: Engine | None = None,
    progress: bool | None = None,
    emit: Callable[[str], None] | None = None,
) -> list[RatePoint]:
    """Every (optimizer, rate) point on ``task``, its working rates marked."""
    reference = task.reference_design()
    optimizers = task.design_family().optimizers
    specs = {
        (name, lr, seed): RunSpec(
            task.name,
            task.fingerprint,
            Condition(),
            seed,
            reference.replace(optimizer=name, lr=lr),
        )
        for name in optimizers
        for lr in RATES
        for seed in SEEDS
    }
    accs = {
        spec: float(rec.trace.val_acc[-1]) if rec.ok and rec.trace is not None else 0.0
        for spec, rec, _ in ensure_records(
            list(specs.values()), task, store=store, engine=engine, progress=progress, copy=False
        )
    }
    points = []
    for name in optimizers:
        medians = {lr: statistics.median(accs[specs[name, lr, s]] for s in SEEDS) for lr in RATES}
        working = working_rate(medians)
        code = measured_on(task)
        points += [
            RatePoint(task.name, name, lr, acc, lr == working, " ".join(map(str, SEEDS)), code)
            for lr, acc in medians.items()
        ]
        if emit:
            emit(f"{task.name} {name}: working rate {working:g} (val acc {medians[working]:.3f})")
    return points


def measured_on(task: Task) -> str:
    """A hash of everything the sweep's numbers depend on: the task's data and reference
    recipe, the training code, and this rule."""
    parts = [task.fingerprint, code_version(), code_text(inspect.getsource(sys.modules[__name__]))]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:12]


def working_rate(medians: dict[float, float]) -> float:
    """The lowest rate within :data:`TOLERANCE` of the best (``medians``: rate -> accuracy)."""
    best = max(medians.values())
    return min(lr for lr, acc in medians.items() if acc >= best - TOLERANCE)
