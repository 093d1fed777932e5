"""Beyond one fault at one severity: manifestation, pairs, sweeps, abstention."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

import faultbench as fb
from conftest import CLASSIFIER_FAULTS, SIGNAL_SEEDS
from faultbench.cli.main import main
from faultbench.faults.fault import FAULTS, condition, moot
from faultbench.reporting.calibration import calibration_table, coverage_curve
from faultbench.reporting.pairs import INCOMPATIBLE, pair_conditions, score_pairs
from faultbench.reporting.sweep import sweep
from faultbench.scoring.evaluate import RunResult, coverage, run_for
from faultbench.scoring.manifest import SIGNALS, manifestation
from faultbench.storage.records import RunRecord
from faultbench.tasks.task import get_task

Grid = dict[tuple[str, int], RunRecord]


def _healthy(grid: Grid) -> list[tuple[fb.Trace, fb.RunConfig]]:
    runs = [grid[("healthy", s)] for s in range(SIGNAL_SEEDS)]
    return [(r.trace, r.config) for r in runs if r.trace and r.config]


@pytest.mark.parametrize("fault", CLASSIFIER_FAULTS)
def test_canonical_faults_manifest_on_digits(fault: str, digits_grid: Grid) -> None:
    record = digits_grid[(fault, 0)]
    assert record.trace and record.config
    seen = manifestation(record.trace, record.config, _healthy(digits_grid))
    assert seen.visible is True and seen.deviations
    assert set(seen.deviations) <= set(SIGNALS)


def test_healthy_run_does_not_manifest(digits_grid: Grid) -> None:
    others = _healthy(digits_grid)
    trace, config = others.pop(0)
    assert manifestation(trace, config, others).visible is False


def test_manifestation_needs_two_healthy_runs(digits_grid: Grid) -> None:
    record = digits_grid[("dead_units", 0)]
    assert record.trace and record.config
    assert manifestation(record.trace, record.config, _healthy(digits_grid)[:1]).visible is None


def test_evaluate_reports_manifestation(digits_grid: Grid, shared_store_root: Path) -> None:
    report = fb.evaluate(
        "always-healthy", "digits", seeds=SIGNAL_SEEDS, grid="classic", store=shared_store_root
    )
    faulty = [r for r in report.results if r.condition != "healthy"]
    assert all(r.manifested is not None for r in faulty)
    assert all(r.manifested is None for r in report.results if r.condition == "healthy")
    summary = report.manifestation
    assert summary["faulty_runs"] == 9 * SIGNAL_SEEDS and summary["named"] == 0
    assert summary["missed_visible"] + summary["missed_invisible"] == 9 * SIGNAL_SEEDS


def _result(condition: str, predicted: str, also: tuple[str, ...] = (), conf=None) -> RunResult:
    return RunResult(0, condition, predicted, "ok", confidence=conf, also=also)


def test_pair_scoring_is_fair_to_single_labels() -> None:
    results = [
        _result("huge_inputs+lr_too_high", "huge_inputs", ("lr_too_high",)),  # exact
        _result("huge_inputs+lr_too_high", "huge_inputs"),  # hit, not exact
        _result("huge_inputs+lr_too_high", "dead_units"),  # wrong
        _result("starved_loader+label_mismatch", "starved_loader", ("dead_units",)),  # extra label
    ]
    score = score_pairs(results)
    assert score.exact == pytest.approx(1 / 4)
    assert score.hit == pytest.approx(2 / 4)
    assert score.jaccard == pytest.approx((1 + 0.5 + 0 + 1 / 3) / 4)
    assert score.recall["huge_inputs"] == pytest.approx(2 / 3)
    assert score.recall["lr_too_high"] == pytest.approx(1 / 3)
    assert score.recall["label_mismatch"] == 0.0


def test_pair_grid_leaves_out_only_declared_incompatibilities() -> None:
    pairs = pair_conditions()
    n = len(FAULTS)
    assert len(pairs) == n * (n - 1) // 2 - len(INCOMPATIBLE)
    assert all(len(p.faults) == 2 for p in pairs)
    assert not any(frozenset(p.labels) in INCOMPATIBLE for p in pairs)


@pytest.mark.parametrize("task", ["digits", "numbers"])
def test_a_tasks_pair_grid_holds_the_faults_that_can_apply_to_it(task: str) -> None:
    left_out = moot(get_task(task))
    faults = {label for p in pair_conditions(task=get_task(task)) for label in p.labels}
    assert faults == set(FAULTS.names()) - set(left_out)
    # A causal mask exists in the transformer only: left out of digits' pairs, in numbers'.
    assert ("causal_mask_missing" in faults) == (task == "numbers")


def test_rules_scored_on_pairs(tmp_path: Path) -> None:
    conditions = pair_conditions(["huge_inputs", "starved_loader", "label_mismatch"])
    report = fb.evaluate("rules", "digits", seeds=1, conditions=conditions, store=tmp_path)
    score = score_pairs(report.results)
    assert score.runs == 3
    assert 0.0 <= score.exact <= score.hit <= 1.0
    # Every pair run is compared with the healthy run of its seed.
    assert all(r.manifested is not None for r in report.results)


class _ByFirstLoss:
    """Names huge_inputs when the first loss is far above ln C, else abstains."""

    name = "by-first-loss"
    tuned_on: frozenset[str] = frozenset()

    def diagnose(self, run: fb.Run) -> fb.Diagnosis:
        ratio = float(run.trace.loss[0]) / math.log(run.config.n_classes)
        if ratio > 3:
            return fb.Diagnosis("huge_inputs", confidence=min(1.0, ratio / 100))
        return fb.Diagnosis("unknown")


def test_sweep_reports_recall_against_severity(tmp_path: Path) -> None:
    result = sweep(
        "huge_inputs", _ByFirstLoss(), "digits", severities=[1000.0, 2.0], seeds=1, store=tmp_path
    )
    assert list(result.table["severity"]) == [2.0, 1000.0]  # mildest first
    assert list(result.table["recall"]) == [0.0, 1.0]
    assert result.smallest_reliable == 1000.0


def test_sweep_rejects_a_fault_without_severity(tmp_path: Path) -> None:
    with pytest.raises(fb.FaultbenchError, match="has no severity knob"):
        sweep("label_mismatch", "rules", "digits", store=tmp_path)


def test_sweep_cli_prints_and_plots(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = [
        "sweep",
        "--fault",
        "lr_too_high",
        "--diagnoser",
        "rules",
        "--task",
        "digits",
        "--seeds",
        "1",
        "--severities",
        "2,100",
        "--out",
        str(tmp_path / "out"),
        "--store",
        str(tmp_path / "store"),
        "--engine",
        "serial",
    ]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "| severity |" in out and "recall" in out
    assert (tmp_path / "out" / "lr_too_high-rules-digits.png").stat().st_size > 1000


def test_abstention_and_calibration() -> None:
    results = [
        _result("huge_inputs", "huge_inputs", conf=0.9),
        _result("huge_inputs", "healthy", conf=0.9),
        _result("dead_units", "dead_units", conf=0.3),
        _result("healthy", "unknown"),
    ]
    cov = coverage(results)
    assert cov["coverage"] == 0.75 and cov["selective_accuracy"] == pytest.approx(2 / 3)
    curve = coverage_curve(results)
    assert list(curve["coverage"]) == [0.25, 0.5, 0.75]
    table = calibration_table(results).set_index("bin")
    assert table.loc["(0.8, 1.0]", "answers"] == 2
    assert table.loc["(0.8, 1.0]", "accuracy"] == 0.5
    assert table.loc["(0.2, 0.4]", "accuracy"] == 1.0
    assert table["answers"].sum() == 3


def test_run_for_builds_probe_of_pair(digits_grid: Grid) -> None:
    pair = condition("huge_inputs", "label_mismatch")
    setup = pair.apply(fb.faults.fault.base_setup(get_task("digits"), 0))
    assert abs(setup.X_train).max() > 100 and (setup.y_train != get_task("digits").y_train).all()
    record = digits_grid[("healthy", 0)]
    assert run_for(record, get_task("digits")).probe is not None


def test_calibration_tables_for_reports() -> None:
    from faultbench.reporting.calibration import calibration_frame, coverage_frame
    from faultbench.scoring.evaluate import Report

    confident = Report("c", "digits", True, ("digits",), (_result("healthy", "healthy", conf=0.9),))
    silent = Report("s", "digits", False, (), (_result("healthy", "unknown"),))
    cover = coverage_frame([silent, confident]).set_index("diagnoser")
    assert cover.loc["c", "coverage"] == "1.000" and cover.loc["s", "coverage"] == "0.000"
    assert cover.loc["s", "selective_accuracy"] == ""  # nothing answered: no accuracy
    calib = calibration_frame([silent, confident])
    assert set(calib["diagnoser"]) == {"c"} and len(calib) == 5  # one row per bin
    assert calib.set_index("bin").loc["(0.8, 1.0]", "accuracy"] == "1.000"
