"""``faultbench run --task realbugs`` and the suite in ``faultbench list``
(faultbench.cli.commands.realbugs_run)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from faultbench.cli.main import main
from faultbench.realbugs import DROPPED, all_cases, case_names, counts_by_label

CHEAP = "aihwkit_simple_layer_zero_grad,forum_xor_without_activation"


def test_list_shows_the_suite_with_its_cases_per_label(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    section = out[out.index("real-bug suite (realbugs") :]
    assert f"{len(case_names())} cases re-enacted from public reports" in section
    for label, count in counts_by_label().items():
        assert f"  {label:<22} {count} cases\n" in section
    assert f"{len(DROPPED)} dropped" in section
    cases = all_cases()
    assert f"fidelity ({sum(c.faithful for c in cases)} of {len(cases)} faithful" in section
    lines = {line.split()[0]: line for line in section.splitlines() if line.startswith("  ")}
    keras = lines["keras_linear_regression_nan_lr"].split()
    assert keras[1:6] == ["regression", "lr_too_high", "own", "own", "own"]
    assert lines["agcn_detached_adjacency"].endswith("no, read from code")


def test_run_scores_the_chosen_cases(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["run", "--diagnoser", "always-healthy", "--task", "realbugs", "--cases", CHEAP]
    argv += ["--store", str(tmp_path), "--json"]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert (out["task"], out["diagnoser"], out["cases"], out["trained"]) == (
        "realbugs",
        "always-healthy",
        2,
        4,
    )
    assert out["scores"]["false_alarms"]["hits"] == 0  # never alarms: always healthy
    assert out["scores"]["identification"]["accuracy"] == {
        "hits": 0,
        "n": 1,
        "value": 0.0,
        "low": pytest.approx(0.0),
        "high": pytest.approx(0.7935, abs=1e-4),
    }
    assert main(argv[:-1]) == 0  # the table, on the stored runs and answers
    table = capsys.readouterr().out
    assert table.startswith("always-healthy on the real-bug suite (2 cases, each faulty and fixed)")
    assert "✗ healthy" in table and "false alarms (fixed twins):            0.000" in table


@pytest.mark.parametrize(
    ("extra", "why"),
    [
        (["--faults", "lr_too_high"], "--faults select grid runs"),
        (["--grid", "classic"], "--grid select grid runs"),
        (["--cases", "no_such_case"], "Unknown real-bug case 'no_such_case'"),
    ],
    ids=["faults", "grid", "unknown-case"],
)
def test_run_refuses_what_the_suite_lacks(
    extra: list[str], why: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["run", "--diagnoser", "always-healthy", "--task", "realbugs", "--store", str(tmp_path)]
    assert main(argv + extra) == 2
    assert why in capsys.readouterr().err


def test_cases_need_the_suite(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["run", "--diagnoser", "always-healthy", "--task", "digits", "--cases", CHEAP]
    assert main(argv) == 2
    assert "--cases selects real-bug cases; expected --task realbugs" in capsys.readouterr().err
