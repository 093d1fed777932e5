"""The command line, end to end, on stored runs."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import DIGITS_CONDITIONS, SIGNAL_SEEDS
from faultbench.cli.main import main
from faultbench.reporting.pairs import pair_conditions
from faultbench.scoring.evaluate import Report, RunResult
from faultbench.scoring.summary import WIDTH, short_labels
from faultbench.storage.records import RunRecord
from faultbench.storage.runner import PROGRESS_EVERY


def test_run_json_on_stored_runs(
    synthetic_grid: dict[tuple[str, int], RunRecord],
    shared_store_root: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = [
        "run",
        "--grid",
        "classic",
        "--diagnoser",
        "always-healthy",
        "--task",
        "synthetic",
        "--json",
        "--seeds",
        str(SIGNAL_SEEDS),
        "--store",
        str(shared_store_root),
    ]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert (out["correct"], out["total"]) == (SIGNAL_SEEDS, 10 * SIGNAL_SEEDS)
    assert out["tuned"] is False and out["diagnoser"] == "always-healthy"
    assert out["task"] == "synthetic" and out["trained"] == 0
    assert list(out["confusion"]) == DIGITS_CONDITIONS
    assert out["confusion"]["dead_units"]["healthy"] == SIGNAL_SEEDS
    assert set(out["confusion"]["healthy"]) == {*DIGITS_CONDITIONS, "unknown"}


def test_run_table_labels_tuned(
    digits_grid: dict[tuple[str, int], RunRecord],
    shared_store_root: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = [
        "run",
        "--grid",
        "classic",
        "--diagnoser",
        "random",
        "--task",
        "digits",
        "--seeds",
        str(SIGNAL_SEEDS),
        "--store",
        str(shared_store_root),
    ]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "held-out" in out and f"/{10 * SIGNAL_SEEDS} correct" in out
    for name in [*DIGITS_CONDITIONS, "unknown"]:
        assert name in out
    assert max(len(line) for line in out.splitlines()) <= WIDTH  # a 100-column terminal


def test_list_shows_registries(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    for name in [*DIGITS_CONDITIONS, "digits", "synthetic", "always-healthy", "random"]:
        assert name in out
    assert "severity 1000" in out  # huge_inputs' canonical severity


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["run", "--grid", "classic", "--diagnoser", "always-healthy", "--task", "digts"],
            "Unknown task 'digts'. Did you mean 'digits'?",
        ),
        (
            ["run", "--grid", "classic", "--diagnoser", "always-healty", "--task", "digits"],
            "Unknown diagnoser 'always-healty'. Did you mean 'always-healthy'?",
        ),
        (
            [
                "run",
                "--grid",
                "classic",
                "--diagnoser",
                "random",
                "--task",
                "digits",
                "--seeds",
                "0",
            ],
            "expected an integer of at least 1; got 0",
        ),
    ],
)
def test_bad_input_exits_2_with_one_line(argv: list[str], message: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "faultbench", *argv], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0]
    assert "Traceback" not in proc.stderr


def _everything_report(truths: list[str]) -> Report:
    """A report in which every truth meets every answer once (the widest matrix)."""
    answers = [*DIGITS_CONDITIONS, "unknown"]
    results = tuple(
        RunResult(seed=i, condition=t, predicted=a, status="ok")
        for t in truths
        for i, a in enumerate(answers)
    )
    return Report(diagnoser="d", task="digits", tuned=False, tuned_on=(), results=results)


@pytest.mark.parametrize("grid", ["canonical", "pairs"])
def test_the_printed_report_fits_100_columns_and_spells_out_its_codes(grid: str) -> None:
    truths = DIGITS_CONDITIONS if grid == "canonical" else [c.name for c in pair_conditions()]
    report = _everything_report(truths)
    text = str(report)
    assert max(len(line) for line in text.splitlines()) <= WIDTH, text
    legend = " ".join(line for line in text.splitlines() if line.startswith(("columns:", " ")))
    codes = short_labels([*DIGITS_CONDITIONS, "unknown"])
    assert len(set(codes.values())) == len(codes)  # distinct
    for name, code in codes.items():
        assert f"{code} = {name}" in legend
    assert len(text.splitlines()) < 40 + len(truths)  # a summary, not the 40 kB repr
    score = f"{report.correct}/{report.total} correct"
    assert repr(report) == f"<Report d on digits (held-out): {score}, 0 failed answers>"


PROGRESS_RUN = (
    "run",
    "--grid",
    "classic",
    "--diagnoser",
    "always-healthy",
    "--task",
    "synthetic",
    "--seeds",
    "1",
)
PROGRESS_RUN += ("--engine", "serial")


def test_long_commands_report_progress_in_lines_when_stderr_is_no_terminal(
    tmp_path: Path,
) -> None:
    start = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "faultbench", *PROGRESS_RUN, "--store", str(tmp_path)],
        capture_output=True,  # stderr is a pipe, as in CI or `make run > log 2>&1`
        text=True,
        timeout=600,
    )
    elapsed = time.monotonic() - start
    assert proc.returncode == 0, proc.stderr
    assert "\r" not in proc.stderr  # each refresh a line of its own, not one endless line
    training = [line for line in proc.stderr.splitlines() if line.startswith("training synthetic")]
    assert training[0].startswith("training synthetic:   0%") and "10/10" in training[-1]
    assert len(training) <= 2 + elapsed / PROGRESS_EVERY  # one line every few seconds at most
    diagnosing = [line for line in proc.stderr.splitlines() if line.startswith("diagnosing")]
    assert diagnosing and "10/10" in diagnosing[-1]
