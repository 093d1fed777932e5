"""Diagnosers that misbehave on purpose, importable as ``bad_diagnosers:Name``.

The isolation tests run them through ``faultbench.scoring.evaluate`` and the CLI
(with ``tests/`` on ``PYTHONPATH``) to show the benchmark survives them.
"""

from __future__ import annotations

import sys
import time

from faultbench.scoring.diagnosis import Diagnosis
from faultbench.scoring.run import Run


class _Base:
    tuned_on: frozenset[str] = frozenset()


class Raising(_Base):
    """Raises on every run."""

    name = "raising"

    def diagnose(self, run: Run) -> Diagnosis:
        raise RuntimeError(f"boom on seed {run.seed}")


class Hanging(_Base):
    """Sleeps for an hour, and swallows the first interruption it can."""

    name = "hanging"

    def diagnose(self, run: Run) -> Diagnosis:
        # A careless diagnoser that swallows errors; the timeout must still win.
        try:  # noqa: SIM105
            time.sleep(3600)
        except Exception:
            pass
        while True:
            pass


class Nonsense(_Base):
    """Answers a string, not a Diagnosis, and prints to stdout."""

    name = "nonsense"

    def diagnose(self, run: Run) -> Diagnosis:
        print("nonsense on stdout")
        return "healthy"  # type: ignore[return-value]


class UnknownLabel(_Base):
    """Answers a label that is no condition."""

    name = "unknown-label"

    def diagnose(self, run: Run) -> Diagnosis:
        return Diagnosis("cosmic_rays")


class Exiting(_Base):
    """Calls sys.exit, which must not end the benchmark."""

    name = "exiting"

    def diagnose(self, run: Run) -> Diagnosis:
        sys.exit(3)


class Healthy(_Base):
    """A well-behaved diagnoser, to show outcomes after a timeout are normal."""

    name = "healthy-answer"

    def diagnose(self, run: Run) -> Diagnosis:
        return Diagnosis("healthy", confidence=0.5)


NOT_A_DIAGNOSER = 42  # for the "isn't a diagnoser" error


def die_on_two(item: int) -> int:
    """An engine task whose worker process dies on item 2 (as if OOM-killed)."""
    import os

    if item == 2:
        os._exit(1)
    return item * 10


class CLoop(_Base):
    """Stays in one C call for hours: no alarm reaches Python code until it returns."""

    name = "c-loop"

    def diagnose(self, run: Run) -> Diagnosis:
        sum(range(10**12))
        return Diagnosis("healthy")


class IgnoresSignals(_Base):
    """Ignores SIGINT, SIGTERM and the alarm, then loops forever: only SIGKILL stops it."""

    name = "ignores-signals"

    def diagnose(self, run: Run) -> Diagnosis:
        import signal

        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGALRM):
            signal.signal(sig, signal.SIG_IGN)
        while True:
            time.sleep(0.01)


class ExitsHard(_Base):
    """Ends its process with os._exit(3): no exception, no clean-up."""

    name = "exits-hard"

    def diagnose(self, run: Run) -> Diagnosis:
        import os

        os._exit(3)


class Segfaults(_Base):
    """Reads address 0 through ctypes: the process dies of SIGSEGV."""

    name = "segfaults"

    def diagnose(self, run: Run) -> Diagnosis:
        import ctypes

        ctypes.string_at(0)
        return Diagnosis("healthy")


class Counting(_Base):
    """Answers from the trace alone and counts probe-free diagnoses (for the overhead test)."""

    name = "counting"

    def diagnose(self, run: Run) -> Diagnosis:
        return Diagnosis("healthy" if run.trace.val_acc[-1] > 0.5 else "too_small_model")


class Sampling(_Base):
    """Says which steps its run's trace recorded (the sampling the run was built at)."""

    name = "sampling"

    def diagnose(self, run: Run) -> Diagnosis:
        return Diagnosis("healthy", evidence={"steps": [int(s) for s in run.trace.stat_steps]})


class Probing(_Base):
    """Takes a few probe steps, so that probe counting across the process boundary shows."""

    name = "probing"

    def diagnose(self, run: Run) -> Diagnosis:
        assert run.probe is not None
        X, y = run.probe.train_data(8)
        model = run.probe.make_model()
        for _ in range(run.seed + 3):
            run.probe.loss(model(X), y)
        return Diagnosis("healthy")


class ProbesUntilStopped(_Base):
    """Takes probe steps until its time limit stops it: how many is the machine's speed."""

    name = "probes-until-stopped"

    def diagnose(self, run: Run) -> Diagnosis:
        assert run.probe is not None
        X, y = run.probe.train_data(8)
        model = run.probe.make_model()
        while True:
            run.probe.loss(model(X), y)


class CrashesOnSeedZero(_Base):
    """Takes its process down on seed 0 and answers on every other seed."""

    name = "crashes-on-seed-zero"

    def diagnose(self, run: Run) -> Diagnosis:
        import os

        if run.seed == 0:
            os._exit(3)
        return Diagnosis("healthy")
