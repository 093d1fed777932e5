"""The user-style example: its own loop, a Monitor in three lines, and the doctor names the bug."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from faultbench.scoring.diagnosis import diagnoser_names
from faultbench.tools.doctor import NO_PROBE_NOTE

SCRIPT = Path(__file__).resolve().parents[1] / "examples" / "train_with_monitor.py"
STEPS = "200"  # enough for the evaluations to move; a few seconds per run


def _run_example(*args: str) -> str:
    # One intra-op thread: a tiny MLP is faster so, and the timings the loader
    # check reads are not distorted by thread contention with the rest of the suite.
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--steps", STEPS, *args],
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


@pytest.mark.skipif("rules" not in diagnoser_names(), reason="the rules diagnoser has not landed")
@pytest.mark.parametrize(
    ("fault", "label"),
    [("none", "healthy"), ("huge_inputs", "huge_inputs"), ("starved_loader", "starved_loader")],
)
def test_doctor_names_the_bug_the_script_was_given(fault: str, label: str) -> None:
    out = _run_example("--fault", fault)
    assert re.search(rf"^diagnosis: {label}\b", out, re.M), out
    assert "upgrade checklist" in out
    wait_line = next(line for line in out.splitlines() if line.startswith("data wait is low"))
    assert wait_line.rstrip().endswith("fail" if fault == "starved_loader" else "pass")


def test_without_a_probe_the_report_says_only_passive_checks_ran() -> None:
    out = _run_example("--fault", "none", "--no-probe", "--diagnoser", "always-healthy")
    assert f"note: {NO_PROBE_NOTE}" in out
    memorize = next(line for line in out.splitlines() if line.startswith("memorizes"))
    assert "not measured: no probe" in memorize


def test_unknown_fault_is_refused() -> None:
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--fault", "huge_input"], capture_output=True, text=True
    )
    assert proc.returncode == 2
    assert "invalid choice: 'huge_input'" in proc.stderr
