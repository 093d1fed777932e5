"""``faultbench calibrate --what alarms``: the doctor's false-alarm budget, measured.

The rule, applied to healthy runs only (no faulty run, held-out task, other kind or
real bug enters it):

1. The runs: the healthy drawn runs of every task the doctor is tuned on (its
   ``tuned_on``), seeds 0 to :data:`~faultbench.scoring.plan.HEALTHY_SEEDS` - 1, the
   verified bases the full grid scores (:func:`~faultbench.storage.bases.verified_bases`),
   each read at :data:`SAMPLINGS` (every step, and the Monitor's default, the two
   samplings the report scores the doctor at).
2. Each statistic of the doctor's checks (:data:`faultbench.diagnosers.doctor.STATISTICS`)
   is read off every run: per kind of task where its scale is the kind's, on every kind
   together where it is not (:attr:`Statistic.per_kind`).
3. The budget :data:`~faultbench.scoring.budget.BUDGET` is split evenly across the checks
   (a union bound: if each stays within its share, the headline stays within the
   budget). A check's threshold is the value at most its share of the healthy readings
   exceed; with few runs that is the largest of them, so a fresh healthy run exceeds it
   with a chance of about one in the readings plus one, per check.

The thresholds are written to :data:`~faultbench.scoring.budget.BUDGET_FILE` with the code
they were measured on (:func:`measured_on`): the healthy runs' training code, the tasks'
data and working rates, and every statistic's code; a test fails while it differs.
"""

from __future__ import annotations

import hashlib
import inspect
import math
import sys
from collections.abc import Callable, Sequence
from dataclasses import replace

from faultbench.core.codetext import code_text
from faultbench.diagnosers import _features, doctor, rules
from faultbench.faults.family import working_rates
from faultbench.faults.fault import Condition
from faultbench.scoring import budget, memorize, soundness
from faultbench.scoring.budget import ANY_KIND, BUDGET, Calibration, Statistic, kind_of
from faultbench.scoring.harness import run_for
from faultbench.scoring.plan import HEALTHY_SEEDS
from faultbench.scoring.run import Run
from faultbench.storage.bases import verified_bases
from faultbench.storage.records import RunSpec, code_version
from faultbench.storage.runner import ensure_records
from faultbench.storage.store import Store
from faultbench.tasks.task import Task, get_task
from faultbench.training.engine import Engine
from faultbench.training.monitor import DEFAULT_EVERY

SAMPLINGS = (1, DEFAULT_EVERY)  # the samplings the report scores the doctor at
STATISTICS: tuple[Statistic, ...] = doctor.STATISTICS


def tuned_on() -> list[Task]:
    """The tasks the doctor is tuned on: the only ones its budget is measured on."""
    return [get_task(name) for name in sorted(doctor.DoctorDiagnoser.tuned_on)]


def share() -> float:
    """Each check's share of the budget."""
    return BUDGET / len(STATISTICS)


def healthy_runs(
    task: Task,
    *,
    store: Store,
    engine: Engine | None = None,
    seeds: Sequence[int] = range(HEALTHY_SEEDS),
    progress: bool | None = None,
) -> list[Run]:
    """The healthy drawn runs of ``task`` on ``seeds``, each read at every :data:`SAMPLINGS`."""
    bases = verified_bases(task, seeds, store=store, engine=engine, progress=progress)
    specs = [
        RunSpec(task.name, task.fingerprint, Condition(), base.seed, base.design)
        for base in bases.values()
    ]
    records = ensure_records(specs, task, store=store, engine=engine, progress=progress)
    return [
        run_for(record, task, every) for _, record, _ in records if record.ok for every in SAMPLINGS
    ]


def calibrate_alarms(
    *,
    tasks: Sequence[Task] | None = None,
    store: Store,
    engine: Engine | None = None,
    seeds: Sequence[int] = range(HEALTHY_SEEDS),
    progress: bool | None = None,
    emit: Callable[[str], None] | None = None,
) -> list[Calibration]:
    """Every check's calibration on the healthy runs of the doctor's tuned-on tasks (``tasks``
    replaces them: a test's small calibration; the budget file holds the tuned-on tasks')."""
    tasks = tuned_on() if tasks is None else tasks
    runs = [
        run
        for task in tasks
        for run in healthy_runs(task, store=store, engine=engine, seeds=seeds, progress=progress)
    ]
    code = measured_on(tasks)
    found = []
    for stat in STATISTICS:
        values: dict[str, list[float]] = {}
        for run in runs:
            kind = kind_of(run) if stat.per_kind else ANY_KIND
            values.setdefault(kind, []).append(float(stat.read(run)))
        for kind, seen in sorted(values.items()):
            if all(math.isnan(v) for v in seen):
                continue  # no run of this kind has the statistic: the check stays silent
            found.append(replace(budget.calibrate(stat.name, kind, seen, share()), code=code))
            if emit:
                c = found[-1]
                emit(
                    f"{stat.name} [{kind}]: threshold {c.threshold:.4g} over "
                    f"{len(c.healthy)} healthy readings (bound {stat.bound:g})"
                )
    return found


def measured_on(tasks: Sequence[Task] | None = None) -> str:
    """A hash of everything the budget depends on: the tuned-on tasks' data and working
    rates, the training code of their healthy runs, the statistics' code and this rule."""
    tasks = tuned_on() if tasks is None else tasks
    parts = [code_version()]
    for task in tasks:
        parts += [task.name, task.fingerprint, repr(sorted(working_rates(task).items()))]
    modules = (budget, soundness, memorize, _features, rules, doctor, sys.modules[__name__])
    parts += [code_text(inspect.getsource(m)) for m in modules]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:12]
