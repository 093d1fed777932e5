"""Diagnose a report's runs ahead of it, on the engine's workers.

A report scores every diagnoser on every task and grid, one evaluation after
another in one process: on a store without answers that is most of a cold
``make report``, on one core. The answers of a shipped diagnoser asked for by
name are stored (:mod:`faultbench.scoring.cache`), so the report can first hand
its evaluations to the workers (each costly diagnoser's task and grid apart, the
quick ones' by task and grid together, so one process asks a run's shared probe
once), which diagnose and store the answers, and then run the same evaluations
in order, reading them back: the report's numbers are the same as without this
step (the stored answer *is* the answer), only made on all cores.

Every run is trained before the workers start (one batch on the engine, so no
two workers train the same run), and so are a learned diagnoser's own training
runs when it has anything left to diagnose. A worker that cannot store its
answers (a Dask worker on another machine with a store of its own) costs time,
never a wrong number: what is not stored is diagnosed again by the report.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from faultbench.scoring.board import Evaluation
from faultbench.scoring.cache import DiagnosisCache, code_for
from faultbench.scoring.contract import contract_of
from faultbench.scoring.diagnosis import get_diagnoser, instruments_of, ships_with_faultbench
from faultbench.scoring.plan import Plan, plan
from faultbench.storage.records import RunSpec
from faultbench.storage.runner import ensure_records
from faultbench.storage.store import Store
from faultbench.tasks.task import get_task
from faultbench.training.engine import Engine


@dataclass(frozen=True)
class _Job:
    """Evaluations as a worker gets them, one after another in one process (the store by
    its folder, and the runs dataset it stands on by its own: a Store does not travel)."""

    evaluations: tuple[Evaluation, ...]
    root: Path
    runs: Path | None
    timeout: float
    isolate: bool | None


#: Plans made in this process, by store and what a plan depends on: every diagnoser's
#: evaluations of one task and grid (each sampling, each prefix) score the same runs, and
#: planning a full grid verifies its drawn bases (most of a warm report's planning).
_PLANS: dict[tuple[object, ...], Plan] = {}


def planned(
    store: Store,
    task: str,
    grid: str,
    seeds: int,
    healthy_seeds: int | None,
    faults: tuple[str, ...] | None,
    engine: Engine | None = None,
    progress: bool | None = False,
) -> Plan:
    """The plan of ``task``'s ``grid`` (planning the full grid trains its bases' healthy
    runs, with ``progress`` lines), made once in this process for ``store``."""
    key = (store.root, task, grid, seeds, healthy_seeds, faults)
    if key not in _PLANS:
        _PLANS[key] = plan(
            get_task(task),
            grid,
            seeds=seeds,
            healthy_seeds=healthy_seeds,
            faults=faults,
            store=store,
            engine=engine,
            progress=progress,
        )
    return _PLANS[key]


def _specs(ev: Evaluation, store: Store, engine: Engine | None = None) -> list[RunSpec]:
    """The runs ``ev`` scores, with the diagnoser's instruments attached: the records its
    evaluation reads."""
    found = planned(store, ev.task, ev.grid, ev.seeds, ev.healthy_seeds, ev.faults, engine)
    return found.with_instruments(instruments_of(get_diagnoser(ev.diagnoser))).specs


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
    stored = [
        ev
        for ev in evaluations
        if ships_with_faultbench(diag := get_diagnoser(ev.diagnoser))
        and not DiagnosisCache(
            store, ev.diagnoser, code_for(diag), ev.every, ev.prefix
        ).answers_all(_specs(ev, store))
    ]  # a rerun with every answer stored starts no worker at all
    for name in dict.fromkeys(ev.diagnoser for ev in stored):
        prepare = contract_of(get_diagnoser(name)).prepare
        if prepare is not None:  # a learned model's own runs, trained here on every worker
            prepare(store=store, engine=engine)  # rather than inside one of them
    most = max((ev.seeds for ev in stored), default=0)
    # Diagnosers scored on a subset of seeds are the ones with a costly probe: one job each,
    # started first. The others go by task and grid, one job for all of them: one process
    # then diagnoses each run at both samplings and with every diagnoser, and what a probe
    # found is found once (rules' memorization serves rules and the doctor, at each sampling).
    groups: dict[tuple[str, ...], list[Evaluation]] = {}
    for ev in stored:
        key = (ev.task, ev.grid) if ev.seeds >= most else (ev.task, ev.grid, ev.diagnoser)
        groups.setdefault(key, []).append(ev)
    order = sorted(groups.values(), key=lambda g: (g[0].seeds >= most, g[0].grid == "classic"))
    runs = store.runs.folder if store.runs is not None else None
    jobs = [_Job(tuple(group), store.root, runs, timeout, isolate) for group in order]
    for _ in engine.map_unordered(_diagnose, jobs):
        pass  # answers are in the store; an exception here is met again by the report


def _diagnose(job: _Job) -> int:
    from faultbench.scoring.evaluate import evaluate

    answered = 0
    for ev in job.evaluations:
        try:
            report = evaluate(
                ev.diagnoser,
                ev.task,
                seeds=ev.seeds,
                grid=ev.grid,
                healthy_seeds=ev.healthy_seeds,
                faults=ev.faults,
                every=ev.every,
                prefix=ev.prefix,
                store=_store(job.root, job.runs),
                timeout=job.timeout,
                isolate=job.isolate,
                progress=False,
            )
        except Exception:  # met again by the report; the group's other evaluations go on
            continue
        answered += len(report.results)
    return answered


_STORES: dict[tuple[Path, Path | None], Store] = {}


def _store(root: Path, runs: Path | None) -> Store:
    """One Store per folder in a worker: it keeps the records it has read for the next job."""
    if (root, runs) not in _STORES:
        _STORES[root, runs] = Store(root, runs=runs)
    return _STORES[root, runs]


__all__ = ["Evaluation", "diagnose_ahead", "train_all"]
