"""Makes sure every run of a grid has a record: loads what is stored, trains the rest."""

from __future__ import annotations

import functools
import sys
import time
import traceback
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any, TextIO

import torch
from tqdm import tqdm

from faultbench.core import kernels
from faultbench.faults.fault import base_setup
from faultbench.storage import records
from faultbench.storage.records import RunRecord, RunSpec
from faultbench.storage.store import KeyLock, Store, stamped
from faultbench.tasks.task import TASKS, Task, get_task
from faultbench.training.engine import Engine, SerialEngine
from faultbench.training.instruments import (
    Factory,
    Instrument,
    build,
    in_own_process,
    needs_own_process,
)
from faultbench.training.loop import TrainResult, train


@dataclass(frozen=True, eq=False)
class TrainJob:
    """What a worker needs to train one run."""

    spec: RunSpec  # the run
    task: Task | None  # None for registered tasks: the worker rebuilds them by name
    key: str  # the driver's cache key: a worker with other code must not re-key it
    code_version: str  # the driver's code version, recorded with the run
    instruments: tuple[Factory, ...] = ()  # the spec's instruments' factories, resolved here
    steps: int | None = None  # a shorter run than the task's (checks, tests); None: the task's


def make_job(
    spec: RunSpec,
    task: Task | None = None,
    *,
    instruments: tuple[Factory, ...] | None = None,
    steps: int | None = None,
) -> TrainJob:
    """The job for ``spec``, keyed by this (driver) process's code version.

    The spec's instruments are resolved here, in the driver, and travel as their
    factories: a worker need not have imported the module that registered one.
    ``instruments`` replaces them (one factory per spec instrument, e.g. a
    collecting variant); ``steps`` shortens the run.
    """
    factories = tuple(ref.factory for ref in spec.instruments)
    if instruments is not None:
        if len(instruments) != len(spec.instruments):
            raise ValueError("expected one factory per instrument of the spec")
        factories = instruments
    return TrainJob(spec, task, spec.key(), records.code_version(), factories, steps)


@dataclass(frozen=True)
class GaveUp:
    """An instrumented run whose every instrument gave up at its first step: what they
    recorded there. The run itself is the plain run (an instrument never changes it)."""

    instruments: dict[str, dict[str, Any]]  # name -> the instrument's record


def train_record(job: TrainJob) -> RunRecord | GaveUp:
    """Train one run and return its record (never raises for a failing run), or, for an
    instrumented run whose every instrument gives up at its first step, what they
    recorded there (:func:`first_step_gave_up`): the driver pairs it with the plain run.

    Raises:
        Unpinned: this process's torch already runs CPU kernels other than the pinned
            ones (:func:`faultbench.core.kernels.require`): not a failing run, a
            process that must not train one.
    """
    kernels.require()
    start = time.perf_counter()
    spec = job.spec
    try:
        if (given_up := first_step_gave_up(job)) is not None:
            return given_up
        result = train_result(job)
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
        instruments=result.instruments,
    )


def train_result(job: TrainJob) -> TrainResult:
    """Train ``job``'s run: here, or in a fresh interpreter of its own when one of its
    instruments asks for it (it patches libraries for good; see
    :func:`faultbench.training.instruments.in_own_process`)."""
    if needs_own_process(job.instruments):
        return in_own_process(functools.partial(train_job, job))
    return train_job(job)


def first_step_gave_up(job: TrainJob) -> GaveUp | None:
    """Train the run's first step alone with its instruments: what they recorded, if every
    one of them gave up there (:meth:`~faultbench.training.instruments.Instrument.gave_up`);
    None if one watches on, or if one cannot give up (no step is tried for it) or trains
    in a process of its own.

    The step is the run's own: the same recipe, model, first batch and loop, shortened
    to one step; an instrument that gave up records nothing more, so what it recorded
    there is what it would record over the whole run.
    """
    if not job.instruments or needs_own_process(job.instruments):
        return None
    named = [(ref.name, f) for ref, f in zip(job.spec.instruments, job.instruments, strict=True)]
    built = build(named)
    if not all(type(instrument).gave_up is not Instrument.gave_up for instrument in built):
        return None
    task = job.task or get_task(job.spec.task)
    with one_thread():
        recipe = job.spec.condition.apply(base_setup(task, job.spec.seed, job.spec.design))
        result = train(recipe.replace(steps=1), instruments=built)
    if not all(instrument.gave_up() for instrument in built):
        return None
    return GaveUp(result.instruments)


def with_gave_up(plain: RunRecord, job: TrainJob, given_up: GaveUp) -> RunRecord:
    """The record of ``job``'s instrumented run from its plain run's record: the same
    trace (an instrument never changes the run), the instruments' records of the first
    step, and no training seconds (the run was not trained again: the instrument
    overhead table leaves it out)."""
    return replace(
        plain,
        spec=job.spec,
        key=job.key,
        attempt="",
        created="",
        host="",
        seconds=0.0,
        instruments=given_up.instruments,
    )


def train_job(job: TrainJob) -> TrainResult:
    """Train ``job``'s run here, with a fresh instrument from each of its factories (built
    here: an instrument that asks for a process of its own is handed one by
    :func:`train_record`, which runs this function there)."""
    spec = job.spec
    task = job.task or get_task(spec.task)
    named = [(ref.name, f) for ref, f in zip(spec.instruments, job.instruments, strict=True)]
    with one_thread():
        recipe = spec.condition.apply(base_setup(task, spec.seed, spec.design))
        if job.steps is not None:
            recipe = recipe.replace(steps=job.steps)
        return train(recipe, instruments=build(named))


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
    copy: bool = True,
) -> Iterator[tuple[RunSpec, RunRecord, bool]]:
    """Yield (spec, record, trained_now) for every distinct spec, stored ones first.

    A stored record is yielded as a copy of the one the store keeps in memory,
    unless ``copy`` is False (see :meth:`Store.load`): for a caller that only
    looks at it, such as a report counting what it has.

    Trained records are written by this (driver) process as they arrive, so a
    run killed mid-grid keeps every finished run and the next call trains only
    the rest. A run whose training raised, or whose worker died more often than
    the engine retries, is stored and yielded as a ``failed`` record, never dropped.

    Another process may be training the same runs into the same store: each
    run is trained under its key's lock, and a run whose lock is taken is
    waited for and read back instead of trained twice.

    Raises:
        FaultbenchError: a run is missing and the store cannot be written (before any training).
    """
    missing = []
    for spec in dict.fromkeys(specs):  # a spec listed twice is trained and scored once
        record = store.load(spec, copy=copy)
        if record is None:
            missing.append(spec)
        else:
            yield spec, record, False
    if not missing:
        return
    store.require_writable()
    registered = task.name in TASKS and get_task(task.name) is task
    engine = engine or SerialEngine()
    with progress_bar(len(missing), f"training {task.name}", unit="run", show=progress) as bar:
        while missing:
            mine, theirs = [], []
            for spec, record, lock in _claim(store, missing):
                if record is not None:  # another process trained it meanwhile
                    bar.update()
                    yield spec, record, False
                elif lock is None:
                    theirs.append(spec)
                else:
                    mine.append((spec, lock))
            for spec, record in _train(mine, None if registered else task, store, engine):
                bar.update()
                yield spec, record, True
            if theirs:
                _wait_for_any(store, theirs)
            missing = theirs


WAIT_POLL = 0.2  # seconds between looks at the locks another process holds


def _wait_for_any(store: Store, specs: Sequence[RunSpec]) -> None:
    """Return once another process has let go of any one of ``specs``' locks.

    Any, not a given one: the other process trains its runs in its own order,
    and waiting for the last of them would leave this one idle meanwhile.
    """
    locks = [store.lock(spec) for spec in specs]
    while True:
        for lock in locks:
            if lock.acquire(blocking=False):
                lock.release()
                return
        time.sleep(WAIT_POLL)


def _claim(
    store: Store, specs: Sequence[RunSpec]
) -> Iterator[tuple[RunSpec, RunRecord | None, KeyLock | None]]:
    """Each spec with its record if someone stored it meanwhile, else its lock if free."""
    for spec in specs:
        lock = store.lock(spec)
        if not lock.acquire(blocking=False):
            yield spec, None, None
            continue
        record = store.load(spec, note=False)  # read again under the lock
        if record is not None:
            lock.release()
        yield spec, record, None if record is not None else lock


def _train(
    claimed: Sequence[tuple[RunSpec, KeyLock]], task: Task | None, store: Store, engine: Engine
) -> Iterator[tuple[RunSpec, RunRecord]]:
    """Train the claimed runs; each lock is let go once its record is written."""
    locks = {spec: lock for spec, lock in claimed}
    jobs = [make_job(spec, task) for spec in locks]
    waiting: list[tuple[TrainJob, GaveUp]] = []  # their plain runs are not stored yet

    def keep(job: TrainJob, record: RunRecord) -> tuple[RunSpec, RunRecord]:
        record = stamped(record)
        store.save(record)
        locks.pop(job.spec).release()
        return job.spec, record

    try:
        for job, result in engine.map_unordered(train_record, jobs):
            if isinstance(result, kernels.Unpinned):
                raise result  # nothing trained, nothing to store: the caller must move
            if isinstance(result, BaseException):
                result = _failed(job, f"{type(result).__name__}: {result}", 0.0)
            if isinstance(result, GaveUp):
                plain = store.load(_plain(job.spec), note=False, copy=False)
                if plain is None:  # trained later in this batch, or by nobody yet
                    waiting.append((job, result))
                    continue
                result = with_gave_up(plain, job, result)
            yield keep(job, result)
        if waiting:
            plains = [_plain(job.spec) for job, _ in waiting]
            found = ensure_records(
                plains,
                get_task(plains[0].task) if task is None else task,
                store=store,
                engine=engine,
                progress=False,
                copy=False,
            )
            by_spec = {spec: record for spec, record, _ in found}
            for job, given_up in waiting:
                yield keep(job, with_gave_up(by_spec[_plain(job.spec)], job, given_up))
    finally:  # stopped early: the untrained runs are free for anyone again
        for lock in locks.values():
            lock.release()


def _plain(spec: RunSpec) -> RunSpec:
    """The run without instruments."""
    return spec.with_instruments(())


PROGRESS_EVERY = 5.0  # seconds between progress lines when stderr is not a terminal


def progress_bar(total: int, desc: str, *, unit: str, show: bool | None = None) -> tqdm[Any]:
    """A progress bar on stderr: live on a terminal, one line every few seconds elsewhere.

    Args:
        total: Steps to go.
        desc: What is being done ("training digits").
        unit: What one step is ("run").
        show: False hides it; None (the default) and True show it.
    """
    stream = sys.stderr
    tty = stream.isatty()
    return tqdm(
        total=total,
        desc=desc,
        unit=unit,
        disable=show is False,
        file=stream if tty else _Lines(stream),
        mininterval=0.1 if tty else PROGRESS_EVERY,
        ascii=not tty,
    )


class _Lines:
    """A stream where each of tqdm's refreshes becomes a line of its own.

    tqdm redraws in place with a carriage return, which a log file or a CI
    console shows as one endless line (or nothing until the end).
    """

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream

    def write(self, text: str) -> None:
        for part in text.split("\r"):
            if part.strip():
                self.stream.write(part.rstrip() + "\n")

    def flush(self) -> None:
        self.stream.flush()
