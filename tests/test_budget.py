"""The doctor's false-alarm budget: thresholds at a share of healthy values, tail shares,
per-kind silence, the versioned file and the code it was measured on."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from faultbench.diagnosers.doctor import STATISTICS
from faultbench.scoring.budget import (
    ANY_KIND,
    BUDGET,
    BUDGET_FILE,
    Statistic,
    calibrate,
    calibration,
    judge,
    load_budget,
    write_budget,
)
from faultbench.scoring.run import Run
from faultbench.storage.bases import DATA_BOUND
from faultbench.tools import alarms
from faultbench.training.trace import RunConfig, Trace

HEALTHY = [0.9, 0.1, 0.5, 0.3, 0.7, 0.2, 0.8, 0.4, 0.6, float("nan")]


def _run(kind: str = "multiclass", classes: int = 10) -> Run:
    empty = np.zeros(0)
    trace = Trace(
        np.zeros(3), {}, {}, empty, empty, np.zeros(3), np.ones(3), empty, empty, empty, empty
    )
    config = RunConfig("Adam", 1e-3, 32, 3, classes, (8, classes), 100, kind=kind)
    return Run("t", 0, trace, config)


def _stat(value: float, *, per_kind: bool = False, bound: float = 0.5) -> Statistic:
    return Statistic("s", lambda run: value, bound, per_kind, "a test statistic")


@pytest.mark.parametrize(
    ("share", "threshold"), [(0.0, 0.9), (0.12, 0.8), (0.25, 0.7), (1.0, -math.inf)]
)
def test_the_threshold_lets_its_share_of_healthy_values_exceed_it(
    share: float, threshold: float
) -> None:
    found = calibrate("s", ANY_KIND, HEALTHY, share)
    assert found.healthy == tuple(sorted(v for v in HEALTHY if not math.isnan(v)))
    assert found.threshold == threshold
    above = sum(v > found.threshold for v in found.healthy)
    assert above == found.allowed <= share * len(found.healthy)


def test_the_tail_share_counts_the_healthy_values_at_or_above() -> None:
    found = calibrate("s", ANY_KIND, HEALTHY, 0.0)
    values = np.array(found.healthy)
    for x in (0.05, 0.3, 0.65, 0.9, 1.5):
        assert found.tail(x) == pytest.approx(np.mean(values >= x))
    assert math.isnan(found.tail(float("nan")))


@pytest.mark.parametrize(
    ("value", "fired"), [(0.4, False), (0.85, False), (0.9, False), (0.95, True), (math.inf, True)]
)
def test_a_check_fires_at_its_bound_and_beyond_the_healthy_runs(
    tmp_path: Path, value: float, fired: bool
) -> None:
    path = write_budget([calibrate("s", ANY_KIND, HEALTHY, 0.0)], tmp_path / "budget.csv")
    reading = judge(_stat(value), _run(), path=path)
    assert reading.fired is fired and reading.threshold == 0.9 and reading.runs == 9
    assert reading.tail == pytest.approx(np.mean(np.array(HEALTHY[:-1]) >= value))
    assert "healthy runs of the tuned-on tasks reach it" in reading.describe()


def test_a_bound_no_healthy_run_reaches_still_decides(tmp_path: Path) -> None:
    path = write_budget([calibrate("s", ANY_KIND, [0.01, 0.02], 0.0)], tmp_path / "budget.csv")
    assert judge(_stat(0.4), _run(), path=path).fired is False  # beyond the runs, below bound
    assert judge(_stat(0.5), _run(), path=path).fired is True  # reaches the bound
    strict = replace(_stat(0.5), strict=True)
    assert judge(strict, _run(), path=path).fired is False


def test_a_kind_no_tuned_on_task_has_stays_silent_and_says_so(tmp_path: Path) -> None:
    path = write_budget([calibrate("s", "multiclass", HEALTHY, 0.0)], tmp_path / "budget.csv")
    stat = _stat(5.0, per_kind=True)
    assert judge(stat, _run("multiclass"), path=path).fired
    silent = judge(stat, _run("binary", 1), path=path)
    assert not silent.fired and math.isnan(silent.threshold)
    assert "not calibrated for kind 'binary'" in silent.note and silent.evidence()["note"]
    # a user's Monitor without a kind, scoring classes, reads as multiclass
    assert judge(stat, _run(""), path=path).fired


def test_the_file_round_trips_and_is_left_alone_when_unchanged(tmp_path: Path) -> None:
    rows = [
        calibrate("a", "regression", [1.0, 2.5, math.inf], 0.5),
        calibrate("b", ANY_KIND, [-math.inf, 3.0], 0.0),
    ]
    path = write_budget(rows, tmp_path / "budget.csv")
    assert load_budget(path) == sorted(rows, key=lambda c: (c.check, c.kind))
    before = path.stat().st_mtime_ns
    write_budget(list(reversed(rows)), path)
    assert path.stat().st_mtime_ns == before
    assert (
        calibration("a", "regression", path) == rows[0] and calibration("a", ANY_KIND, path) is None
    )


def test_the_budget_is_split_across_every_check_of_the_headline() -> None:
    names = [s.name for s in STATISTICS]
    assert len(set(names)) == len(names) and alarms.share() * len(names) == pytest.approx(BUDGET)


def test_the_committed_budget_was_measured_on_this_code_for_every_check() -> None:
    rows = load_budget(BUDGET_FILE)
    assert rows, "no budget: faultbench calibrate --what alarms"
    stale = {c.code for c in rows} - {alarms.measured_on()}
    assert not stale, f"budget measured on other code ({sorted(stale)}): make calibrate"
    checked = {c.check for c in rows}
    assert checked <= {s.name for s in STATISTICS}
    pooled = {s.name for s in STATISTICS if not s.per_kind}
    assert pooled <= checked  # every check that reads any kind has healthy runs behind it
    assert all(c.allowed <= alarms.share() * len(c.healthy) for c in rows)


def test_no_healthy_run_the_wait_threshold_was_measured_on_is_data_bound() -> None:
    # The family's loaders keep a healthy run's wait well below its compute, so the largest
    # healthy wait share, which the threshold is, stays below the bound of data-bound; a
    # loader that starved the small models again would raise it there (0.87 once).
    wait = calibration("wait_share", ANY_KIND)
    assert wait is not None and len(wait.healthy) >= 100
    assert wait.threshold < DATA_BOUND, wait.threshold
