"""The command line, end to end, on stored runs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import SIGNAL_SEEDS
from faultbench.cli.main import main
from faultbench.faults.fault import condition_names
from faultbench.storage.records import RunRecord


def test_run_json_on_stored_runs(
    synthetic_grid: dict[tuple[str, int], RunRecord],
    shared_store_root: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = [
        "run",
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
    assert list(out["confusion"]) == condition_names()
    assert out["confusion"]["dead_units"]["healthy"] == SIGNAL_SEEDS
    assert set(out["confusion"]["healthy"]) == {*condition_names(), "unknown"}


def test_run_table_labels_tuned(
    digits_grid: dict[tuple[str, int], RunRecord],
    shared_store_root: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = [
        "run",
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
    for name in [*condition_names(), "unknown"]:
        assert name in out


def test_list_shows_registries(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    for name in [*condition_names(), "digits", "synthetic", "always-healthy", "random"]:
        assert name in out
    assert "severity 1000" in out  # huge_inputs' canonical severity


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["run", "--diagnoser", "always-healthy", "--task", "digts"],
            "Unknown task 'digts'. Did you mean 'digits'?",
        ),
        (
            ["run", "--diagnoser", "always-healty", "--task", "digits"],
            "Unknown diagnoser 'always-healty'. Did you mean 'always-healthy'?",
        ),
        (
            ["run", "--diagnoser", "random", "--task", "digits", "--seeds", "0"],
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
