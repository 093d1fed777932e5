"""Calls a diagnoser on one run without letting it take the benchmark down.

A diagnoser that raises, answers something that is not a ``Diagnosis``,
names a label nobody knows, or runs past its time limit gets an ``error`` or
``timeout`` outcome with the reason; the benchmark goes on.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from faultbench.diagnosis import UNKNOWN, Diagnoser, Diagnosis
from faultbench.faults import condition_names
from faultbench.run import Run

DEFAULT_TIMEOUT = 60.0  # seconds one diagnosis may take (``--timeout``)


class DiagnosisTimeout(Exception):
    """Raised inside a diagnoser that ran past its time limit."""


@dataclass(frozen=True)
class Outcome:
    """What came of asking a diagnoser about one run."""

    status: str  # "ok", "error" or "timeout"
    label: str  # the answer; "unknown" unless status is "ok"
    confidence: float | None = None  # the diagnoser's, if given
    evidence: dict[str, Any] = field(default_factory=dict)  # the diagnoser's numbers
    message: str = ""  # what went wrong, for error and timeout
    probe_steps: int = 0  # probe training steps the diagnosis used
    seconds: float = 0.0  # wall time of the diagnosis


def diagnose_safely(diagnoser: Diagnoser, run: Run, *, timeout: float = DEFAULT_TIMEOUT) -> Outcome:
    """Ask ``diagnoser`` about ``run``, turning every failure into an Outcome."""
    start = time.perf_counter()
    known = set(condition_names()) | {UNKNOWN}
    status, message, answer = "ok", "", None
    try:
        with _time_limit(timeout):
            answer = diagnoser.diagnose(run)
    except DiagnosisTimeout:
        status, message = "timeout", f"diagnose() ran past {timeout:g} s"
    except Exception as exc:
        status, message = "error", f"diagnose() raised {type(exc).__name__}: {exc}"
    seconds = time.perf_counter() - start
    steps = run.probe.steps_used if run.probe is not None else 0
    if status == "ok" and not isinstance(answer, Diagnosis):
        status = "error"
        message = f"{_name(diagnoser)}.diagnose returned {type(answer).__name__}, expected Diagnosis"
    elif status == "ok" and answer is not None and answer.label not in known:
        status = "error"
        message = f"{_name(diagnoser)}.diagnose returned unknown label {answer.label!r}"
    if status != "ok" or answer is None:
        return Outcome(status, UNKNOWN, message=message, probe_steps=steps, seconds=seconds)
    return Outcome(
        "ok", answer.label, answer.confidence, dict(answer.evidence), "", steps, seconds
    )


def _name(diagnoser: object) -> str:
    return type(diagnoser).__name__


@contextmanager
def _time_limit(seconds: float) -> Iterator[None]:
    # SIGALRM interrupts pure-Python loops and sleeps; it exists only in the
    # main thread of a POSIX process, elsewhere the limit is not enforced.
    usable = hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()
    if not usable or seconds <= 0:
        yield
        return

    def expire(_signum: int, _frame: object) -> None:
        raise DiagnosisTimeout

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
