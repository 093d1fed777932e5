"""Makes sure every run of a grid has a record: loads what is stored, trains the rest."""

from __future__ import annotations

import sys
import time
import traceback
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from tqdm import tqdm

from faultbench.faults.fault import base_setup
from faultbench.storage import records
from faultbench.storage.records import RunRecord, RunSpec
from faultbench.storage.store import Store
from faultbench.tasks.task import TASKS, Task, get_task
from faultbench.training.engine import Engine, SerialEngine
from faultbench.training.loop import train


@dataclass(frozen=True, eq=False)
class TrainJob:
    """What a worker needs to train one run."""

    spec: RunSpec  # the run
    task: Task | None  # None for registered tasks: the worker rebuilds them by name
    key: str  # the driver's cache key: a worker with other code must not re-key it
    code_version: str  # the driver's code version, recorded with the run


def make_job(spec: RunSpec, task: Task | None = None) -> TrainJob:
    """The job for ``spec``, keyed by this (driver) process's code version."""
    return TrainJob(spec, task, spec.key(), records.code_version())


def train_record(job: TrainJob) -> RunRecord:
    """Train one run and return its record (never raises for a failing run)."""
    start = time.perf_counter()
    spec = job.spec
    try:
        task = job.task or get_task(spec.task)
        with one_thread():
            result = train(spec.condition.apply(base_setup(task, spec.seed)))
    except Exception as exc:
        detail = traceback.format_exc(limit=3)
        return _failed(job, f"{type(exc).__name__}: {exc}", time.perf_counter() - start, detail)
    return RunRecord(
        spec=spec,
        key=job.key,
        attempt="",
        status="ok",
        seconds=result.seconds,
        trace=result.trace,
        config=result.config,
        code_version=job.code_version,
    )


@contextmanager
def one_thread() -> Iterator[None]:
    """One torch thread while inside, the caller's count after."""
    # A run this small only loses to thread hand-offs, and in-process training
    # next to a busy machine inflated compute time enough to hide a starved loader.
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _failed(job: TrainJob, message: str, seconds: float, detail: str = "") -> RunRecord:
    return RunRecord(
        spec=job.spec,
        key=job.key,
        attempt="",
        status="failed",
        seconds=seconds,
        error=f"{message}\n{detail}".strip(),
        code_version=job.code_version,
    )


def ensure_records(
    specs: Sequence[RunSpec],
    task: Task,
    *,
    store: Store,
    engine: Engine | None = None,
    progress: bool | None = None,
) -> Iterator[tuple[RunSpec, RunRecord, bool]]:
    """Yield (spec, record, trained_now) for every distinct spec, stored ones first.

    Trained records are written by this (driver) process as they arrive, so a
    run killed mid-grid keeps every finished run and the next call trains only
    the rest. A run whose training raised, or whose worker died more often than
    the engine retries, is stored and yielded as a ``failed`` record, never dropped.
    """
    missing = []
    for spec in dict.fromkeys(specs):  # a spec listed twice is trained and scored once
        record = store.load(spec)
        if record is None:
            missing.append(spec)
        else:
            yield spec, record, False
    if not missing:
        return
    registered = task.name in TASKS and get_task(task.name) is task
    jobs = [make_job(spec, None if registered else task) for spec in missing]
    engine = engine or SerialEngine()
    show = sys.stderr.isatty() if progress is None else progress
    with tqdm(total=len(jobs), desc=f"training {task.name}", unit="run", disable=not show) as bar:
        for job, result in engine.map_unordered(train_record, jobs):
            if isinstance(result, BaseException):
                result = _failed(job, f"{type(result).__name__}: {result}", 0.0)
            store.save(result)
            bar.update()
            yield job.spec, result, True
