"""Conformance checks for diagnosers, in the spirit of scikit-learn's ``check_estimator``.

Each check is a function ``check_x(diagnoser)`` that raises :class:`CheckFailed`
with a reason when the diagnoser breaks the contract the benchmark relies on.
:func:`run_checks` runs them all; :func:`parametrize_checks` turns them into
one pytest case per (diagnoser, check)::

    from faultbench.tools.checks import parametrize_checks

    @parametrize_checks(MyDiagnoser())
    def test_conforms(diagnoser, check):
        check(diagnoser)

The runs the checks use are short (a fraction of a benchmark run) and trained
once per process on the digits task.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np

from faultbench.faults.fault import base_setup, condition, labels
from faultbench.scoring.contract import name_of, problems
from faultbench.scoring.diagnosis import (
    UNKNOWN,
    Diagnoser,
    get_diagnoser,
    instruments_of,
)
from faultbench.scoring.harness import Outcome, diagnose_safely
from faultbench.scoring.run import Probe, Run
from faultbench.storage.records import RunRecord, RunSpec, code_version
from faultbench.storage.runner import make_job, train_result
from faultbench.storage.store import Store
from faultbench.tasks.task import get_task
from faultbench.training.instruments import references
from faultbench.training.loop import TrainResult

CHECK_STEPS = 120  # long enough for every trace signal to exist, short enough to train in ~1 s
CHECK_TIMEOUT = 60.0  # seconds one diagnosis may take inside a check
CHECK_SEED = 0  # the checks' runs are always the same


class CheckFailed(AssertionError):
    """A diagnoser broke the contract; the message says how."""


@dataclass(frozen=True)
class CheckResult:
    """The outcome of one named check."""

    name: str  # the check function's name
    passed: bool  # whether the diagnoser passed it
    message: str = ""  # why it failed


# -- the runs the checks use -------------------------------------------------------


@functools.cache
def _trained(fault: str, instruments: tuple[str, ...] = ()) -> tuple[Any, TrainResult]:
    task = get_task("digits")
    setup = condition(fault).apply(base_setup(task, CHECK_SEED)).replace(steps=CHECK_STEPS)
    spec = RunSpec(task.name, task.fingerprint, condition(fault), CHECK_SEED)
    job = make_job(spec.with_instruments(references(instruments)), steps=CHECK_STEPS)
    return setup, train_result(job)


def make_run(
    fault: str = "healthy", *, diverged: bool = False, instruments: tuple[str, ...] = ()
) -> Run:
    """A fresh short digits run with ``fault`` injected (its own probe, zero steps used),
    trained with ``instruments`` (names) attached to its loop.

    ``diverged`` turns every loss, gradient and update from the middle on into
    NaN, as a run that blew up leaves them (the instruments' records stay as trained).
    """
    setup, result = _trained(fault, tuple(sorted(instruments)))
    assert result.trace is not None and result.config is not None
    trace = _diverge(result.trace) if diverged else result.trace
    probe = Probe.from_setup(setup)
    return Run("digits", CHECK_SEED, trace, result.config, probe, dict(result.instruments))


def _run_for(diagnoser: Diagnoser, fault: str, *, diverged: bool = False) -> Run:
    """:func:`make_run` with the instruments ``diagnoser`` declares."""
    names = tuple(ref.name for ref in instruments_of(diagnoser))
    return make_run(fault, diverged=diverged, instruments=names)


def _diverge(trace: Any) -> Any:
    half = trace.steps // 2

    def nan_after(values: np.ndarray) -> np.ndarray:
        out = np.array(values, dtype=np.float64)
        out[half:] = math.nan
        return out

    return dataclasses.replace(
        trace,
        loss=nan_after(trace.loss),
        grad_norm={k: nan_after(v) for k, v in trace.grad_norm.items()},
        update_ratio={k: nan_after(v) for k, v in trace.update_ratio.items()},
        val_loss=np.full_like(trace.val_loss, math.nan),
        val_acc=np.full_like(trace.val_acc, 1.0 / 10),
        weight_change={k: math.nan for k in trace.weight_change},
    )


def _ask(diagnoser: Diagnoser, run: Run) -> Outcome:
    outcome = diagnose_safely(diagnoser, run, timeout=CHECK_TIMEOUT)
    if outcome.status != "ok":
        raise CheckFailed(f"on {run!r}: {outcome.status}: {outcome.message}")
    return outcome


# -- the checks ---------------------------------------------------------------------


def check_interface(diagnoser: Diagnoser) -> None:
    """It keeps the contract (:mod:`faultbench.scoring.contract`): a str ``name``, a set of
    task names ``tuned_on``, a callable ``diagnose``, and every optional attribute it
    declares of the right kind; the message has one line per failure."""
    found = problems(diagnoser)
    if found:
        raise CheckFailed("\n".join(found))


def check_returns_diagnosis(diagnoser: Diagnoser) -> None:
    """``diagnose`` returns a ``Diagnosis`` for a healthy run, without raising."""
    _ask(diagnoser, _run_for(diagnoser, "healthy"))


def check_known_labels(diagnoser: Diagnoser) -> None:
    """Every answer is a label (a condition name or ``other_fault``) or ``unknown``, on
    healthy and faulty runs."""
    known = {*labels(), UNKNOWN}
    for fault in ("healthy", "label_mismatch", "softmax_before_loss"):
        label = _ask(diagnoser, _run_for(diagnoser, fault)).label
        if label not in known:
            raise CheckFailed(
                f"answered {label!r} on a {fault} run; expected one of {sorted(known)}"
            )


def check_ignores_condition(diagnoser: Diagnoser) -> None:
    """The answer does not change with what the store or the caller says the truth is.

    The run is offered twice, each time with a different decoy condition
    recorded for its task and seed in the default store and held in the
    calling frame. A diagnoser that only reads the run answers the same.
    """
    labels = {decoy: _with_decoy(diagnoser, decoy) for decoy in ("frozen_layer", "huge_inputs")}
    if len(set(labels.values())) > 1:
        raise CheckFailed(f"the answer followed a decoy condition it must not see: {labels}")


def check_deterministic(diagnoser: Diagnoser) -> None:
    """Two diagnoses of the same faulty run agree (label and confidence)."""
    # A run check_known_labels already trained: an instrumented diagnoser's run (TrainCheck
    # traces each in an interpreter of its own) costs seconds to tens of seconds apiece.
    first, second = (_ask(diagnoser, _run_for(diagnoser, "label_mismatch")) for _ in range(2))
    if (first.label, first.confidence) != (second.label, second.confidence):
        raise CheckFailed(
            f"two diagnoses of one run differ: {first.label!r} ({first.confidence}) vs "
            f"{second.label!r} ({second.confidence})"
        )


def check_handles_diverged_run(diagnoser: Diagnoser) -> None:
    """A run whose losses and gradients turned NaN gets a known label, not an error."""
    outcome = _ask(diagnoser, _run_for(diagnoser, "healthy", diverged=True))
    if outcome.label not in {*labels(), UNKNOWN}:
        raise CheckFailed(f"answered {outcome.label!r} on a diverged run")


#: Every check, in the order they run.
CHECKS: tuple[Callable[[Diagnoser], None], ...] = (
    check_interface,
    check_returns_diagnosis,
    check_known_labels,
    check_ignores_condition,
    check_deterministic,
    check_handles_diverged_run,
)


def run_checks(diagnoser: str | Diagnoser) -> list[CheckResult]:
    """Run every check; a failed interface check skips the rest (they would only crash).

    Raises:
        FaultbenchError: ``diagnoser`` is a name or ``module:Class`` that does not resolve.
    """
    diag = get_diagnoser(diagnoser) if isinstance(diagnoser, str) else diagnoser
    results: list[CheckResult] = []
    for check in CHECKS:
        try:
            check(diag)
        except CheckFailed as exc:
            results.append(CheckResult(check.__name__, False, str(exc)))
            if check is check_interface:
                break
        else:
            results.append(CheckResult(check.__name__, True))
    return results


def parametrize_checks(*diagnosers: Diagnoser) -> Any:
    """A ``pytest.mark.parametrize`` over (diagnoser, check) for every check."""
    import pytest  # a test-time helper: pytest is only needed when it is used

    cases = [(d, c) for d in diagnosers for c in CHECKS]
    ids = [f"{name_of(d)}-{c.__name__}" for d, c in cases]
    return pytest.mark.parametrize(("diagnoser", "check"), cases, ids=ids)


# -- helpers ------------------------------------------------------------------------


def _with_decoy(diagnoser: Diagnoser, decoy: str) -> str:
    run = _run_for(diagnoser, "healthy")
    task = get_task(run.task)
    spec = RunSpec(task.name, task.fingerprint, condition(decoy), run.seed)
    record = RunRecord(
        spec, spec.key(), "", "ok", 0.0, run.trace, run.config, code_version=code_version()
    )
    with tempfile.TemporaryDirectory() as root, _store_at(root):
        Store(root).save(record)
        truth = decoy  # noqa: F841  (in this frame on purpose: a frame-reading diagnoser finds it)
        return _ask(diagnoser, run).label


@contextmanager
def _store_at(root: str) -> Iterator[None]:
    previous = os.environ.get("FAULTBENCH_STORE")
    os.environ["FAULTBENCH_STORE"] = root
    try:
        yield
    finally:
        if previous is None:
            del os.environ["FAULTBENCH_STORE"]
        else:
            os.environ["FAULTBENCH_STORE"] = previous
