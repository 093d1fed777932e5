"""Diagnose a report's runs ahead of it, on the engine's workers.

A report scores every diagnoser on every task and grid, one evaluation after
another in one process: on a store without answers that is most of a cold
``make report``, on one core. The answers of a shipped diagnoser asked for by
name are stored (:mod:`faultbench.scoring.cache`), so the report can first hand
each (diagnoser, task, grid) evaluation to a worker, which diagnoses and stores
the answers, and then run the same evaluations in order, reading them back: the
report's numbers are the same as without this step (the stored answer *is* the
answer), only made on all cores.

Every run of a task is trained before its diagnoses start (one batch on the
engine, so no two workers train the same run), and so are a learned diagnoser's
own training runs when it has anything left to diagnose. On a local pool, a task's
diagnoses start as soon as its runs are stored, on a second pool at idle priority
that takes what the training leaves of the cores (:func:`train_and_diagnose`). A
worker that cannot store its
answers (a Dask worker on another machine with a store of its own) costs time,
never a wrong number: what is not stored is diagnosed again by the report.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from faultbench.scoring.cache import DiagnosisCache, diagnosis_code
from faultbench.scoring.diagnosis import get_diagnoser, instruments_of, ships_with_faultbench
from faultbench.scoring.plan import plan
from faultbench.storage.records import RunSpec
from faultbench.storage.runner import ensure_records
from faultbench.storage.store import Store
from faultbench.tasks.task import get_task
from faultbench.training.engine import Engine, LocalEngine
from faultbench.training.monitor import DEFAULT_EVERY


@dataclass(frozen=True)
class Evaluation:
    """One evaluation of a report: what :func:`faultbench.scoring.evaluate.evaluate` is asked."""

    diagnoser: str  # a registered name
    task: str
    grid: str  # "classic" or "full"
    seeds: int
    every: int = DEFAULT_EVERY  # the sampling the traces are read at
    healthy_seeds: int | None = None  # the full grid's healthy runs (None: the default)


@dataclass(frozen=True)
class _Job:
    """An evaluation as a worker gets it (the store by its folder: a Store does not travel)."""

    evaluation: Evaluation
    root: Path
    timeout: float
    isolate: bool | None


def _specs(ev: Evaluation, store: Store, engine: Engine | None = None) -> list[RunSpec]:
    """The runs ``ev`` scores (planning the full grid trains its bases' healthy runs), with
    the diagnoser's instruments attached: the records its evaluation reads."""
    task = get_task(ev.task)
    refs = instruments_of(get_diagnoser(ev.diagnoser))
    kept = plan(
        task,
        ev.grid,
        seeds=ev.seeds,
        healthy_seeds=ev.healthy_seeds,
        store=store,
        engine=engine,
        progress=False,
    ).with_instruments(refs)
    return kept.specs


def train_all(evaluations: Sequence[Evaluation], store: Store, engine: Engine) -> int:
    """Train every run the evaluations score that is not stored, in one batch per task on
    ``engine`` (after the full grids' bases are verified). Returns runs trained."""
    trained = 0
    by_task: dict[str, list[RunSpec]] = {}
    for ev in evaluations:
        by_task.setdefault(ev.task, []).extend(_specs(ev, store, engine))
    for name, specs in by_task.items():
        unique = list(dict.fromkeys(specs))
        found = ensure_records(unique, get_task(name), store=store, engine=engine, copy=False)
        trained += sum(fresh for _, _, fresh in found)
    return trained


def train_and_diagnose(
    evaluations: Sequence[Evaluation],
    store: Store,
    engine: Engine,
    *,
    timeout: float,
    isolate: bool | None,
) -> int:
    """:func:`train_all`, then :func:`diagnose_ahead`, overlapped on a local pool.

    There, each task's evaluations are diagnosed as soon as its runs are stored, by a
    second pool of as many workers at idle priority: while the later tasks train, it
    gets only the CPU time training leaves unused (a starved loader's waits, the tail
    of each batch, the driver's own work) and, once training is done, all of it. The
    answers are the same either way; only when they are made changes. A diagnosis made
    during training takes longer in wall time (a measurement, like every other).
    Returns runs trained.
    """
    if not isinstance(engine, LocalEngine):
        trained = train_all(evaluations, store, engine)
        diagnose_ahead(evaluations, store, engine, timeout=timeout, isolate=isolate)
        return trained
    trained, prepared = 0, set[str]()
    background = LocalEngine(engine.workers, idle=True)
    try:
        with ThreadPoolExecutor(max_workers=1) as feeder:  # one task's jobs after another
            for task in dict.fromkeys(ev.task for ev in evaluations):
                mine = [ev for ev in evaluations if ev.task == task]
                trained += train_all(mine, store, engine)
                jobs = _jobs(mine, store, engine, timeout, isolate, prepared)
                feeder.submit(_drain, background, jobs)
    finally:
        background.close()  # after the feeder: leaving the `with` waited for every job
    return trained


def diagnose_ahead(
    evaluations: Sequence[Evaluation],
    store: Store,
    engine: Engine,
    *,
    timeout: float,
    isolate: bool | None,
) -> None:
    """Have ``engine``'s workers diagnose (and store) every evaluation whose answers can be
    stored, the slowest diagnosers first. Failures are left for the report to meet again."""
    _drain(engine, _jobs(evaluations, store, engine, timeout, isolate, set()))


def _jobs(
    evaluations: Sequence[Evaluation],
    store: Store,
    engine: Engine,
    timeout: float,
    isolate: bool | None,
    prepared: set[str],
) -> list[_Job]:
    """The evaluations with answers left to store, as jobs, the slowest first; each of
    their diagnosers not in ``prepared`` is prepared here first (and added to it)."""
    code = diagnosis_code()
    stored = [
        ev
        for ev in evaluations
        if ships_with_faultbench(get_diagnoser(ev.diagnoser))
        and not DiagnosisCache(store, ev.diagnoser, code, ev.every).answers_all(_specs(ev, store))
    ]  # a rerun with every answer stored starts no worker at all
    for name in dict.fromkeys(ev.diagnoser for ev in stored):
        prepare = getattr(get_diagnoser(name), "prepare", None)
        if callable(prepare) and name not in prepared:  # a learned model's own runs,
            prepare(store=store, engine=engine)  # trained here on every worker, not in one
        prepared.add(name)
    most = max((ev.seeds for ev in stored), default=0)
    # Diagnosers scored on a subset of seeds are the ones with a costly probe: start them first.
    stored.sort(key=lambda ev: (ev.seeds >= most, ev.grid == "classic"))
    return [_Job(ev, store.root, timeout, isolate) for ev in stored]


def _drain(engine: Engine, jobs: Sequence[_Job]) -> None:
    for _ in engine.map_unordered(_diagnose, jobs):
        pass  # answers are in the store; an exception here is met again by the report


def _diagnose(job: _Job) -> int:
    from faultbench.scoring.evaluate import evaluate

    ev = job.evaluation
    report = evaluate(
        ev.diagnoser,
        ev.task,
        seeds=ev.seeds,
        grid=ev.grid,
        healthy_seeds=ev.healthy_seeds,
        every=ev.every,
        store=_store(job.root),
        timeout=job.timeout,
        isolate=job.isolate,
        progress=False,
    )
    return len(report.results)


_STORES: dict[Path, Store] = {}


def _store(root: Path) -> Store:
    """One Store per folder in a worker: it keeps the records it has read for the next job."""
    if root not in _STORES:
        _STORES[root] = Store(root)
    return _STORES[root]
