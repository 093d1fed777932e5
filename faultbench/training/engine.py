"""Where training runs execute: in-process, a local process pool, or Dask.

Workers only compute: they return records and the driver writes them, so a
store never sees two writers. Every engine streams results as they finish.
The local pool's and a local Dask cluster's workers run the pinned CPU kernels
(:mod:`faultbench.core.kernels`) whatever their parent runs; the workers of an
existing Dask scheduler must be started with its environment (a run refuses to
train on one that is not).
"""

from __future__ import annotations

import logging
import multiprocessing
import os
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from typing import Any, Protocol, TypeVar

from faultbench.core import kernels
from faultbench.core.errors import FaultbenchError

T = TypeVar("T")
R = TypeVar("R")

MAX_RETRIES = 2  # a task whose worker died is retried this many times, then fails
DASK_CONNECT_TIMEOUT = "5s"  # how long to try reaching a Dask scheduler before giving up


class WorkerDied(RuntimeError):
    """The process running a task died (killed, out of memory, segfault)."""


class Engine(Protocol):
    """Runs ``fn`` over items, yielding (item, result or exception) as each finishes."""

    name: str

    def map_unordered(
        self, fn: Callable[[T], R], items: Iterable[T]
    ) -> Iterator[tuple[T, R | BaseException]]:
        """Run ``fn`` on every item; exceptions are returned, not raised."""
        ...

    def close(self) -> None:
        """Release workers."""
        ...


def _as_done(futures: Iterable[Future[R]]) -> Iterator[Future[R]]:
    waiting = set(futures)
    while waiting:
        done, waiting = wait(waiting, return_when=FIRST_COMPLETED)
        yield from done


def _init_worker() -> None:
    # The pinned CPU kernels, set before this process imports torch (a pool's worker is
    # a fresh process; its parent may be a notebook that was never pinned).
    kernels.pin()
    # One torch thread per process: N processes on N cores beat N*N threads.
    import torch

    torch.set_num_threads(1)


class SerialEngine:
    """Runs everything in the calling process, one item at a time."""

    name = "serial"

    def map_unordered(
        self, fn: Callable[[T], R], items: Iterable[T]
    ) -> Iterator[tuple[T, R | BaseException]]:
        """Run in order, in this process."""
        for item in items:
            try:
                yield item, fn(item)
            except Exception as exc:
                yield item, exc

    def close(self) -> None:
        """Nothing to release."""


class LocalEngine:
    """A pool of worker processes on this machine (one per core by default).

    The pool starts on the first :meth:`map_unordered` that has work (so a run
    whose records are all stored never starts one) and is reused by later
    calls until :meth:`close`: a worker pays for importing torch only once.
    """

    name = "local"

    def __init__(self, workers: int | None = None) -> None:
        self.workers = workers or max(1, len(os.sched_getaffinity(0)))
        self._executor: ProcessPoolExecutor | None = None

    def _pool(self) -> ProcessPoolExecutor:
        if self._executor is None:
            self._executor = ProcessPoolExecutor(
                self.workers,
                mp_context=multiprocessing.get_context("spawn"),
                initializer=_init_worker,
            )
        return self._executor

    def _discard_pool(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=True, cancel_futures=True)
            self._executor = None

    def map_unordered(
        self, fn: Callable[[T], R], items: Iterable[T]
    ) -> Iterator[tuple[T, R | BaseException]]:
        """Stream results as workers finish; retry tasks whose worker died.

        A dead worker breaks the whole pool, so every task in flight fails with
        it and nobody knows which one killed it. Those tasks are retried one at
        a time in a pool of their own, and only there does a death count
        against a task: an innocent neighbour is never reported as failed.
        """
        items = list(items)
        if not items:
            return  # a fully stored grid never pays for a pool
        suspects: list[T] = []
        pool = self._pool()
        futures = {pool.submit(fn, item): item for item in items}
        try:
            for future in _as_done(futures):
                exc = future.exception()
                if isinstance(exc, BrokenProcessPool):
                    suspects.append(futures[future])
                else:
                    yield futures[future], exc if exc is not None else future.result()
        except BaseException:
            self._discard_pool()  # the caller stopped early: drop queued work
            raise
        if suspects:
            self._discard_pool()  # a broken pool takes no more work
        for item in suspects:
            yield item, self._alone(fn, item)

    def _alone(self, fn: Callable[[T], R], item: T) -> R | BaseException:
        tries = MAX_RETRIES + 1
        for _ in range(tries):
            future = self._pool().submit(fn, item)
            exc = future.exception()
            if not isinstance(exc, BrokenProcessPool):
                return exc if exc is not None else future.result()
            self._discard_pool()
        return WorkerDied(f"worker died {tries} times running this task alone")

    def close(self) -> None:
        """Shut the worker processes down."""
        self._discard_pool()


class _OneThread:
    """Wraps a task so that it runs with one torch thread, on any worker."""

    def __init__(self, fn: Callable[[Any], Any]) -> None:
        self.fn = fn

    def __call__(self, item: Any) -> Any:
        _init_worker()
        return self.fn(item)


class DaskEngine:
    """A Dask distributed cluster: a new LocalCluster, or an existing scheduler.

    Dask does the scheduling, retries and data transfer; workers return
    records and only this (driver) process writes them.
    """

    name = "dask"

    def __init__(self, address: str | None = None, workers: int | None = None) -> None:
        try:
            from distributed import Client, LocalCluster
        except ImportError:  # dask is an extra: most users never need a cluster
            raise FaultbenchError(
                "--engine dask needs the dask extra, which is not installed; expected "
                "'distributed' importable: pip install 'faultbench[dask]'"
            ) from None
        _quiet_dask()
        self._cluster = None
        if address:
            try:
                self._client = Client(address, timeout=DASK_CONNECT_TIMEOUT)
            except (OSError, TimeoutError) as exc:
                raise FaultbenchError(
                    f"cannot reach the Dask scheduler at '{address}' within "
                    f"{DASK_CONNECT_TIMEOUT} ({type(exc).__name__}); expected a running "
                    "scheduler such as tcp://HOST:8786, or omit --address for a local cluster"
                ) from None
        else:
            n = workers or max(1, len(os.sched_getaffinity(0)))
            import dask

            # Not daemonic: a design's DataLoader starts a worker process of its own
            # (faultbench.faults.batches), which a daemonic process may not. Set for as long as
            # the cluster lives: its nannies read it whenever they (re)start a worker.
            dask.config.set({"distributed.worker.daemon": False})
            self._cluster = LocalCluster(
                n_workers=n,
                threads_per_worker=1,
                processes=True,
                env=kernels.ENVIRONMENT,  # set in each worker before it runs a task
                dashboard_address=":0",  # any free port: 8787 may be taken
                silence_logs=logging.ERROR,
            )
            self._client = Client(self._cluster)

    def map_unordered(
        self, fn: Callable[[T], R], items: Iterable[T]
    ) -> Iterator[tuple[T, R | BaseException]]:
        """Submit everything; yield as the scheduler reports completions."""
        from distributed import as_completed

        items = list(items)
        if not items:
            return
        futures = self._client.map(_OneThread(fn), items, pure=False, retries=MAX_RETRIES)
        index = {f.key: i for i, f in enumerate(futures)}
        for future in as_completed(futures):
            item = items[index[future.key]]
            try:
                yield item, future.result()
            except Exception as exc:
                yield item, exc

    def close(self) -> None:
        """Close the client and any cluster this engine started."""
        self._client.close()
        if self._cluster is not None:
            self._cluster.close()


def _quiet_dask() -> None:
    # Dask logs every worker start and stop at INFO; the CLI shows errors only.
    for name in ("distributed", "dask"):
        logging.getLogger(name).setLevel(logging.ERROR)


ENGINES = ("local", "serial", "dask")


def make_engine(
    name: str = "local", *, workers: int | None = None, address: str | None = None
) -> Any:
    """Build an engine by name.

    Raises:
        FaultbenchError: unknown engine name, or ``workers`` below 1.
    """
    if workers is not None and workers < 1:
        raise FaultbenchError(f"workers must be at least 1; got {workers}")
    if name == "local":
        return LocalEngine(workers)
    if name == "serial":
        return SerialEngine()
    if name == "dask":
        return DaskEngine(address, workers)
    from faultbench.core.errors import unknown_name

    raise unknown_name("engine", name, ENGINES)
