"""A diagnoser that declares ``reads_trace = False`` is not read again at every step by the
report: its answer must then not depend on the trace at all. Each is handed a run whose
trace refuses every read, and must answer as it does on the run itself."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from faultbench.faults.fault import condition
from faultbench.scoring.diagnosis import diagnoser_names, get_diagnoser, instruments_of
from faultbench.scoring.harness import diagnose_safely, run_for
from faultbench.storage.records import RunSpec
from faultbench.storage.runner import make_job, train_record
from faultbench.tasks.task import get_task

pytestmark = pytest.mark.slow


def _blind() -> list[str]:
    names = []
    for name in diagnoser_names():
        try:
            diagnoser = get_diagnoser(name)
        except Exception:  # a tool whose extra is missing: not testable here
            continue
        if getattr(diagnoser, "reads_trace", True) is False:
            names.append(name)
    return names


class _Untouchable:
    """A trace whose every attribute read fails the test."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"read the trace's {name!r}")


def test_the_report_reads_the_shipped_tools_at_one_sampling() -> None:
    assert {"cockpit", "cockpit-live", "lr-range", "thedeepchecker", "weightwatcher"} <= set(
        _blind()
    )


@pytest.mark.parametrize("name", _blind())
@pytest.mark.parametrize("fault", ["healthy", "lr_too_high"])
def test_a_diagnoser_that_reads_no_trace_answers_without_it(name: str, fault: str) -> None:
    task = get_task("digits")
    diagnoser = get_diagnoser(name)
    spec = RunSpec(task.name, task.fingerprint, condition(fault), 0)
    spec = spec.with_instruments(tuple(instruments_of(diagnoser)))
    record = train_record(make_job(spec))
    assert record.ok, record.error
    run = run_for(record, task)
    seen = diagnose_safely(diagnoser, run, timeout=600)
    blind = diagnose_safely(diagnoser, dataclasses.replace(run, trace=_Untouchable()), timeout=600)
    assert seen.status == blind.status == "ok", (seen.message, blind.message)
    assert (blind.label, blind.confidence, blind.evidence) == (
        seen.label,
        seen.confidence,
        seen.evidence,
    )
