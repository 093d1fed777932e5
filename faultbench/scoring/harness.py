"""Calls a diagnoser on one run without letting it take the benchmark down.

A diagnoser that raises (even ``SystemExit``), answers something that is not
a ``Diagnosis``, names a label nobody knows, or runs past its time limit gets
an ``error`` or ``timeout`` outcome with the reason; the benchmark goes on.
Whatever it prints goes to stderr, so ``faultbench run --json`` stays parseable.

This module works inside one process: an alarm stops Python code at the limit,
but not a call that stays in C, nor one that kills the process.
:mod:`faultbench.scoring.worker` runs the same call in a worker process that
can be killed, for diagnosers that do not come with faultbench.
"""

from __future__ import annotations

import contextlib
import math
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from faultbench.core.errors import FaultbenchError
from faultbench.core.limits import DEFAULT_TIMEOUT
from faultbench.faults.fault import base_setup, labels
from faultbench.scoring.diagnosis import UNDECIDED, UNKNOWN, Diagnoser, Diagnosis
from faultbench.scoring.run import Probe, Run
from faultbench.storage.records import RunRecord
from faultbench.tasks.task import Task
from faultbench.training.loop import THREADS  # the runs' thread count
from faultbench.training.monitor import DEFAULT_EVERY

#: What a diagnosis can end as: answered, raised or answered nonsense, ran past
#: its limit, or took its worker process down (segfault, ``os._exit``).
STATUSES = ("ok", "error", "timeout", "crashed")

#: Why a run trained with instruments is not read at a prefix: what an instrument recorded
#: is its own (a tool's whole-run summary), with no step at which it could be cut.
UNCUT = "an instrument's record holds the whole run and cannot be cut at a prefix"
_REPEAT = 0.5  # after the limit, the alarm repeats this often until the diagnoser yields


class DiagnosisTimeout(BaseException):
    """Raised inside a diagnoser that ran past its time limit.

    A ``BaseException`` so that a diagnoser's own ``except Exception`` cannot
    swallow it and keep running.
    """


@dataclass(frozen=True)
class Outcome:
    """What came of asking a diagnoser about one run."""

    status: str  # one of STATUSES
    label: str  # the answer; "unknown" unless status is "ok"
    confidence: float | None = None  # the diagnoser's, if given
    evidence: dict[str, Any] = field(default_factory=dict)  # the diagnoser's numbers
    message: str = ""  # what went wrong, unless status is "ok"
    probe_steps: int = 0  # probe training steps the diagnosis used
    seconds: float = 0.0  # wall time of the diagnosis
    also: tuple[str, ...] = ()  # further labels, for runs with several faults


def check_timeout(timeout: object) -> float:
    """``timeout`` as float seconds, or one clear error.

    Raises:
        FaultbenchError: not a number, or not positive and finite (0 and
            infinity used to mean "no limit", which let a hang stall the benchmark).
    """
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
        raise FaultbenchError(
            f"timeout must be a positive number of seconds; got {type(timeout).__name__}"
        )
    if not (math.isfinite(timeout) and timeout > 0):
        raise FaultbenchError(f"timeout must be a positive number of seconds; got {timeout:g}")
    return float(timeout)


def run_for(record: RunRecord, task: Task, every: int = DEFAULT_EVERY, prefix: float = 1.0) -> Run:
    """The run a diagnoser is handed for ``record``: trace, config, probe, no truth.

    The trace is read as ``Monitor(every=every)`` would have recorded the run
    (:meth:`~faultbench.training.trace.Trace.sampled`): by default the Monitor's
    default, the trace a practitioner has; ``every=1`` gives every step. With
    ``prefix`` below 1 the run is cut at that share of its steps, as a run stopped
    there would have it (:meth:`~faultbench.training.trace.Trace.prefix`, and the
    configuration's steps and rate so far). The records of the instruments the run
    trained with come as they are (an instrument keeps its own schedule).

    Raises:
        ValueError: a prefix of a run trained with instruments: their records hold the
            whole run and cannot be cut (:data:`UNCUT`).
    """
    assert record.trace is not None and record.config is not None
    spec = record.spec
    if prefix < 1.0 and record.instruments:
        raise ValueError(f"{UNCUT} ({', '.join(sorted(record.instruments))})")
    setup = spec.condition.apply(base_setup(task, spec.seed, spec.design))
    trace = record.trace.sampled(every).prefix(prefix)
    config = record.config if prefix == 1.0 else record.config.until(trace)
    probe = Probe.from_setup(setup, key=record.key)
    return Run(task.name, spec.seed, trace, config, probe, dict(record.instruments))


def diagnose_safely(diagnoser: Diagnoser, run: Run, *, timeout: float = DEFAULT_TIMEOUT) -> Outcome:
    """Ask ``diagnoser`` about ``run`` in this process, turning every failure into an Outcome.

    Args:
        diagnoser: Anything with a ``diagnose(run)`` method.
        run: The run to diagnose.
        timeout: Seconds the diagnosis may take (positive). In the main thread
            a SIGALRM interrupts Python code (a long C call ends first);
            elsewhere the diagnosis runs in a helper thread that is abandoned
            when the limit passes. Only a worker process
            (:class:`faultbench.scoring.worker.DiagnosisWorker`) stops both.

    Returns:
        The outcome; never raises except for ``KeyboardInterrupt``.

    Raises:
        FaultbenchError: ``timeout`` is not a positive number.
    """
    timeout = check_timeout(timeout)
    start = time.perf_counter()
    status, message, answer = "ok", "", None
    try:
        answer = _call_limited(lambda: diagnoser.diagnose(run), timeout)
    except DiagnosisTimeout:
        status, message = "timeout", f"diagnose() ran past {timeout:g} s"
    except (Exception, SystemExit) as exc:
        status, message = "error", f"diagnose() raised {type(exc).__name__}: {exc}"
    seconds = time.perf_counter() - start
    steps = run.probe.steps_used if run.probe is not None else 0
    if status == "ok":
        message = _invalid(diagnoser, answer)
        status = "error" if message else "ok"
    if status != "ok" or not isinstance(answer, Diagnosis):
        return Outcome(status, UNKNOWN, message=message, probe_steps=steps, seconds=seconds)
    return Outcome(
        "ok",
        answer.label,
        answer.confidence,
        dict(answer.evidence),
        "",
        steps,
        seconds,
        tuple(answer.also),
    )


def _invalid(diagnoser: object, answer: object) -> str:
    """Why ``answer`` is not a usable Diagnosis, or "" when it is."""
    name = type(diagnoser).__name__
    if not isinstance(answer, Diagnosis):
        return f"{name}.diagnose returned {type(answer).__name__}, expected Diagnosis"
    if not isinstance(answer.label, str) or answer.label not in {*labels(), UNKNOWN, UNDECIDED}:
        return f"{name}.diagnose returned unknown label {answer.label!r}"
    also = getattr(answer, "also", ())
    if not isinstance(also, tuple) or any(a not in labels() for a in also):
        return f"{name}.diagnose returned also={also!r}, expected a tuple of condition names"
    if not isinstance(answer.evidence, Mapping):
        return f"{name}.diagnose returned evidence of type {type(answer.evidence).__name__}"
    conf = answer.confidence
    if conf is not None and not (isinstance(conf, (int, float)) and 0.0 <= conf <= 1.0):
        return f"{name}.diagnose returned confidence {conf!r}, expected a number in [0, 1]"
    return ""


def _call_limited(fn: Callable[[], Any], seconds: float) -> Any:
    with contextlib.redirect_stdout(sys.stderr), _reproducible():
        if hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread():
            with _alarm(seconds):
                return fn()
        return _in_thread(fn, seconds)


@contextlib.contextmanager
def _reproducible() -> Iterator[None]:
    # A probe trains with the runs' one thread, so a diagnosis gives the same
    # answer on any machine (a sum's last bits follow the thread count), and a
    # tiny model is not slowed by thread hand-offs. (Deterministic algorithms
    # matter on accelerators; on the CPU the thread count is what varies, and
    # torch's first switch to them costs seconds a time limit would count.)
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(THREADS)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


@contextlib.contextmanager
def _alarm(seconds: float) -> Iterator[None]:
    # SIGALRM interrupts pure-Python loops and sleeps. The alarm repeats after
    # the limit in case the diagnoser catches the first one; ``armed`` stops a
    # late tick from firing in our own clean-up, and the caller's handler and
    # timer are put back so no alarm leaks into the next diagnosis.
    armed = True

    def expire(_signum: int, _frame: object) -> None:
        if armed:
            raise DiagnosisTimeout

    started = time.monotonic()
    previous = signal.signal(signal.SIGALRM, expire)
    old_delay, old_interval = signal.setitimer(signal.ITIMER_REAL, seconds, _REPEAT)
    try:
        yield
    finally:
        armed = False
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        if old_delay > 0:
            left = max(old_delay - (time.monotonic() - started), 1e-3)
            signal.setitimer(signal.ITIMER_REAL, left, old_interval)


def _in_thread(fn: Callable[[], Any], seconds: float) -> Any:
    # Off the main thread there is no SIGALRM: run the diagnosis in a daemon
    # thread and stop waiting for it at the limit (it cannot be killed).
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:
            box["error"] = exc

    worker = threading.Thread(target=target, name="faultbench-diagnose", daemon=True)
    worker.start()
    worker.join(seconds)
    if worker.is_alive():
        raise DiagnosisTimeout
    if "error" in box:
        raise box["error"]
    return box.get("value")
