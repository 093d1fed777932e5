"""Diagnoses in a worker process that can be killed, so no diagnoser can hang the benchmark.

Inside one process nothing stops a diagnoser that stays in C code
(``sum(range(10**12))``), ignores every signal, segfaults or calls
``os._exit``. A :class:`DiagnosisWorker` runs the diagnoser in a spawned
process of its own (a fresh interpreter, not a fork: forking a process that
holds torch's thread pool can deadlock, and unlike multiprocessing's spawn it
never re-runs the caller's ``__main__`` script) and hands it one stored record
at a time over a pipe; the worker
rebuilds the run and its :class:`~faultbench.scoring.run.Probe` from the record
and the task, and sends back the :class:`~faultbench.scoring.harness.Outcome`,
probe steps included. Inside the worker the usual alarm stops a Python loop at
the limit, which keeps the process; a diagnosis that has not answered
:data:`GRACE` seconds later is sent SIGTERM, then SIGKILL, and recorded as a
``timeout``; a worker that dies is recorded as ``crashed``. The next diagnosis
starts a fresh worker; otherwise one worker serves every diagnosis, so the
cost is one process start plus the record's trip through a pipe. A worker can be
handed another suite's run builder (:meth:`DiagnosisWorker.use`), so one process
serves a diagnoser's every evaluation of a board.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import pickle
import signal
import subprocess
import sys
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from typing import Any

from faultbench.core.errors import FaultbenchError
from faultbench.faults.fault import labels
from faultbench.scoring.diagnosis import UNKNOWN, Diagnoser, ships_with_faultbench
from faultbench.scoring.harness import Outcome, check_timeout, diagnose_safely, run_for
from faultbench.scoring.run import Run
from faultbench.storage.records import RunRecord
from faultbench.tasks.task import Task
from faultbench.training.monitor import DEFAULT_EVERY

GRACE = 2.0  # seconds past the limit for the worker's own alarm to answer, before SIGTERM
TERM_WAIT = 0.5  # seconds between SIGTERM and SIGKILL: a worker that ignores SIGTERM dies anyway
START_LIMIT = 300.0  # seconds a fresh worker may take to import torch and load the diagnoser
BUILD_LIMIT = 120.0  # seconds the worker may take to rebuild a run's setup and probe

_LIVE: weakref.WeakSet[DiagnosisWorker] = weakref.WeakSet()


@dataclass(frozen=True)
class TaskRuns:
    """Rebuilds a grid run from its record and its task (the default run builder)."""

    task: Task  # the task the records belong to
    every: int = DEFAULT_EVERY  # the sampling each trace is read at (see run_for)
    prefix: float = 1.0  # the share of each run's steps it is cut at (see run_for)

    def __call__(self, record: RunRecord) -> Run:
        return run_for(record, self.task, self.every, self.prefix)


@dataclass(frozen=True)
class _Runs:
    """The message that hands a live worker the run builder of the records that follow."""

    payload: bytes  # the pickled builder (unpickled there, after the driver's sys.path)


class DiagnosisWorker:
    """One worker process serving the diagnoses of one diagnoser, one suite at a time.

    Args:
        diagnoser: The diagnoser; it is pickled here (by reference to its class,
            so its module must be importable in a fresh process).
        task: The task the records belong to (pickled too).
        timeout: Seconds one diagnosis may take (positive).
        runs: Builds a run from a record instead of ``task`` (the real-bug suite's
            records are no task's); pickled, so a module-level class. With neither,
            :meth:`use` hands over the builder before the first diagnosis.

    Raises:
        FaultbenchError: ``timeout`` is not positive, or the diagnoser cannot be pickled.
    """

    def __init__(
        self,
        diagnoser: Diagnoser,
        task: Task | None,
        *,
        timeout: float,
        runs: Callable[[RunRecord], Run] | None = None,
    ) -> None:
        self.timeout = check_timeout(timeout)
        self.name = diagnoser.name
        self._diagnoser = diagnoser
        self._payload = b""
        self._pickled()  # refuse an unpicklable diagnoser now, before any work
        if runs is None and task is not None:
            runs = TaskRuns(task)
        self._built = self._pickled_runs(runs) if runs is not None else b""
        self._proc: subprocess.Popen[bytes] | None = None
        self._conn: Connection | None = None
        self.started = 0  # worker processes started, for the overhead measurements

    def _pickled(self) -> bytes:
        try:
            return pickle.dumps(self._diagnoser)
        except Exception as exc:
            raise FaultbenchError(
                f"diagnoser '{self.name}' cannot be sent to a worker process: "
                f"{type(exc).__name__}: {exc}; expected a class defined in an importable "
                "module (or run it in this process: evaluate(..., isolate=False), --in-process)"
            ) from None

    def _pickled_runs(self, runs: Callable[[RunRecord], Run]) -> bytes:
        # The task goes whole: rebuilding a shipped one takes longer than the pipe.
        try:
            return pickle.dumps(runs)
        except Exception as exc:
            raise FaultbenchError(
                f"the runs of '{self.name}' cannot be sent to a worker process: "
                f"{type(exc).__name__}: {exc}; expected a module-level run builder"
            ) from None

    def use(self, runs: Callable[[RunRecord], Run]) -> None:
        """Build the records that follow with ``runs`` (another suite's, or the same task
        read at another sampling), in the live worker if there is one: no new process.

        Raises:
            FaultbenchError: ``runs`` cannot be pickled.
        """
        self._built = self._pickled_runs(runs)
        if self._proc is None or self._conn is None or self._proc.poll() is not None:
            return  # the next start hands it over
        try:
            self._conn.send(_Runs(self._built))
        except OSError:  # it died while idle: the next diagnosis starts a fresh one
            self.close(kill=True)

    def __enter__(self) -> DiagnosisWorker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close(kill=exc[0] is not None)  # Ctrl-C or an error: no waiting for the worker

    def start(self) -> None:
        """Start the worker and wait until it holds the diagnoser and the task.

        The diagnoser is pickled as it is at the first start (after its
        ``prepare``, if it has one) and reused by any later one.

        Raises:
            FaultbenchError: the diagnoser or the task does not load in a fresh process.
        """
        if self._proc is not None and self._proc.poll() is None:
            return
        if not self._built:
            raise ValueError("a worker needs a task or a run builder (runs=, or use())")
        self._payload = self._payload or self._pickled()
        proc, conn = _spawn()
        self._proc, self._conn = proc, conn
        self.started += 1
        _LIVE.add(self)
        conn.send((sys.path, self._payload, self._built, self.timeout))
        kind, value = self._receive(START_LIMIT)
        if kind != "ready":
            why = value if kind == "failed" else _start_failure(kind, proc)
            self.close(kill=True)
            raise FaultbenchError(
                f"diagnoser '{self.name}' cannot be loaded in a worker process: {why}"
            )

    def diagnose(self, record: RunRecord) -> Outcome:
        """Diagnose one stored run; never raises except for ``KeyboardInterrupt``."""
        try:
            self._send(record)
        except FaultbenchError as exc:  # it loaded once: a later start failing is this run's
            return Outcome("crashed", UNKNOWN, message=str(exc))
        assert self._proc is not None
        kind, value = self._receive(BUILD_LIMIT)
        if kind == "started":
            start = time.perf_counter()
            kind, value = self._receive(self.timeout + GRACE)
            seconds = time.perf_counter() - start
        else:
            seconds = 0.0
        if kind == "outcome":
            return value  # type: ignore[no-any-return]
        message = _describe(kind, self._proc, self.timeout)
        self.close(kill=True)
        status = "timeout" if kind == "waiting" else "crashed"
        return Outcome(status, UNKNOWN, message=message, seconds=seconds)

    def _send(self, record: RunRecord) -> None:
        """Hand ``record`` to a live worker (a fresh one if the last died while idle)."""
        for _ in range(2):
            self.start()
            assert self._conn is not None
            try:
                self._conn.send(record)
                return
            except OSError:  # its pipe is closed: the process is gone
                self.close(kill=True)
        raise FaultbenchError(f"diagnoser '{self.name}': its worker process dies on arrival")

    def _receive(self, limit: float) -> tuple[str, Any]:
        """The worker's next message, or ("waiting", None) / ("died", None)."""
        assert self._conn is not None and self._proc is not None
        if not wait([self._conn], timeout=limit):
            return "waiting", None
        try:
            return self._conn.recv()  # type: ignore[no-any-return]
        except (EOFError, OSError):  # the pipe closed: the worker is gone
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._proc.wait(TERM_WAIT)  # let its exit status settle
            return "died", None

    def close(self, *, kill: bool = False) -> None:
        """Stop the worker: ask it to finish, or end it at once with ``kill``."""
        proc, conn = self._proc, self._conn
        self._proc = self._conn = None
        if proc is None or conn is None:
            return
        if not kill and proc.poll() is None:
            with contextlib.suppress(OSError, ValueError):  # the pipe may be gone already
                conn.send(None)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(GRACE)
        if proc.poll() is None:
            proc.terminate()  # SIGTERM: a well-behaved process cleans up
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(TERM_WAIT)
        if proc.poll() is None:
            proc.kill()  # SIGKILL: nothing ignores it
            proc.wait()
        conn.close()


def _spawn() -> tuple[subprocess.Popen[bytes], Connection]:
    """A fresh interpreter running :func:`serve`, and the two-way pipe to it."""
    to_child, from_parent = os.pipe()[::-1]  # (write end, read end)
    from_child, to_parent = os.pipe()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys; from faultbench.scoring.worker import serve; "
            "serve(int(sys.argv[1]), int(sys.argv[2]))",
            str(from_parent),
            str(to_parent),
        ],
        pass_fds=(from_parent, to_parent),
        stdin=subprocess.DEVNULL,
        stdout=2,  # whatever the diagnoser prints goes to our stderr, not into --json
    )
    os.close(from_parent)
    os.close(to_parent)
    return proc, _Pipe(from_child, to_child)


class _Pipe(Connection):
    """One connection over two one-way pipes: read from one fd, write to the other."""

    def __init__(self, read_fd: int, write_fd: int) -> None:
        super().__init__(read_fd, writable=False)
        self._writer = Connection(write_fd, readable=False)

    def send(self, obj: Any) -> None:
        self._writer.send(obj)

    def close(self) -> None:
        self._writer.close()
        super().close()


def _describe(kind: str, proc: subprocess.Popen[bytes], limit: float) -> str:
    """The message for a diagnosis that did not answer."""
    if kind == "waiting":
        return (
            f"diagnose() ran past {limit:g} s and did not stop at the alarm (stuck in C code "
            "or ignoring signals); its worker process was killed"
        )
    code = proc.poll()
    if code is not None and code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"diagnose() crashed its worker process (killed by {name})"
    return f"diagnose() ended its worker process (exit status {code})"


def _start_failure(kind: str, proc: subprocess.Popen[bytes]) -> str:
    if kind == "waiting":
        return f"it did not start within {START_LIMIT:g} s"
    return f"the process ended while starting (exit status {proc.poll()}; see stderr)"


def wants_worker(diagnoser: Diagnoser, isolate: bool | None) -> tuple[bool, str]:
    """Whether ``diagnoser`` runs in a worker process, and a note when it cannot.

    ``isolate=None`` decides: the diagnosers that ship with faultbench run in
    this process (they are tested here, and a worker would only add its start
    and a pipe per diagnosis); every other one runs in a worker, unless its
    class lives in ``__main__`` (a script or a notebook), which a fresh process
    cannot import: that one runs here, with a note saying what that risks.

    Raises:
        FaultbenchError: ``isolate=True`` for a class a fresh process cannot import.
    """
    module = type(diagnoser).__module__
    if isolate is False:
        return False, ""
    if isolate is None and ships_with_faultbench(diagnoser):
        return False, ""
    if module == "__main__":
        if isolate:
            raise FaultbenchError(
                f"diagnoser '{diagnoser.name}' is defined in __main__, which a worker process "
                "cannot import; expected its class in an importable module"
            )
        return False, (
            f"diagnoser '{diagnoser.name}' is defined in __main__, so it ran in this process: "
            "a diagnosis stuck in C code or one that crashes cannot be stopped there; move "
            "its class into a module to run it in a worker process"
        )
    return True, ""


def serve(read_fd: int, write_fd: int) -> None:
    """The worker's loop: load once, then answer one record at a time until told to stop.

    Args:
        read_fd: The pipe the driver writes to.
        write_fd: The pipe the driver reads from.
    """
    import faulthandler

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the driver's: it kills this process
    faulthandler.enable()  # a segfault leaves its traceback on stderr
    conn = _Pipe(read_fd, write_fd)
    try:
        path, payload, built, timeout = conn.recv()
        sys.path[:] = path  # the driver's: the diagnoser's module must import as it did there
        diagnoser, runs = pickle.loads(payload), pickle.loads(built)
        labels()  # the registries load now (plug-ins included), not inside the first time limit
    except BaseException as exc:
        conn.send(("failed", f"{type(exc).__name__}: {exc}"))
        return
    conn.send(("ready", None))
    while True:
        try:
            record = conn.recv()
        except EOFError:  # the driver is gone
            return
        if record is None:
            return
        if isinstance(record, _Runs):  # the next suite's records follow
            runs = _unpickled_runs(record.payload)
            continue
        conn.send(_answer(conn, diagnoser, runs, record, timeout))


def _unpickled_runs(payload: bytes) -> Callable[[RunRecord], Run]:
    """The run builder sent; one that does not load fails each of its runs, not the worker."""
    try:
        return pickle.loads(payload)  # type: ignore[no-any-return]
    except Exception as exc:
        why = f"its run builder does not load here: {type(exc).__name__}: {exc}"

        def broken(record: RunRecord) -> Run:
            raise FaultbenchError(why)

        return broken


def _answer(
    conn: Connection,
    diagnoser: Diagnoser,
    runs: Callable[[RunRecord], Run],
    record: RunRecord,
    timeout: float,
) -> tuple[str, Outcome]:
    try:
        run = runs(record)
    except Exception as exc:  # a broken setup must not stop the other runs
        return "outcome", Outcome("error", UNKNOWN, message=f"building the run failed: {exc!r}")
    conn.send(("started", None))
    outcome = diagnose_safely(diagnoser, run, timeout=timeout)
    try:
        pickle.dumps(outcome)
    except Exception as exc:
        message = f"its answer cannot be sent back: {type(exc).__name__}: {exc}"
        outcome = Outcome("error", UNKNOWN, message=message, seconds=outcome.seconds)
    return "outcome", outcome


@atexit.register
def _kill_leftovers() -> None:
    # A worker left behind (an evaluation abandoned half-way) must not outlive us.
    for worker in list(_LIVE):
        worker.close(kill=True)
