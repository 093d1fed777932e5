"""The grids (full and classic), their selection, the level rule and ``faultbench calibrate``."""

from __future__ import annotations

import itertools
import json
import math
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from conftest import SIGNAL_SEEDS
from faultbench.core.errors import FaultbenchError
from faultbench.faults.family import load_rates
from faultbench.faults.fault import (
    FAULTS,
    HEALTHY,
    HELD_OUT,
    canonical_conditions,
    find,
    inapplicable,
    variant_ids,
)
from faultbench.faults.grid import grid_points
from faultbench.faults.levels import FIXED, LEVELS, Level, hidden_on, load_levels, write_levels
from faultbench.scoring.manifest import SIGNALS, effect, signals
from faultbench.scoring.plan import plan
from faultbench.storage.runner import ensure_records
from faultbench.storage.store import Store
from faultbench.tasks.task import get_task, task_names
from faultbench.tools.calibrate import (
    STEP,
    VISIBLE_SHARE,
    SweepPoint,
    calibrate,
    choose_levels,
    effect_at_precision,
    fixed_variants,
    knob_variants,
    measured_on,
)
from faultbench.tools.rates import measured_on as rates_measured_on
from faultbench.training.engine import SerialEngine

DIGITS = get_task("digits")


def _cli(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "faultbench", *argv], capture_output=True, text=True, timeout=600
    )


# -- the grids ---------------------------------------------------------------------


@pytest.mark.parametrize("task", task_names())
def test_classic_grid_is_healthy_and_the_nine_at_canonical_severity(task: str) -> None:
    points = grid_points(get_task(task), "classic")
    assert [p.condition for p in points] == canonical_conditions(task=get_task(task))
    assert {p.level for p in points[1:]} == {"canonical"}


@pytest.mark.parametrize("task", task_names())
def test_full_grid_has_every_applicable_variant_and_held_out_fault(task: str) -> None:
    the_task = get_task(task)
    points = grid_points(the_task, "full")
    assert points[0].condition.name == HEALTHY
    present = {p.variant for p in points[1:]}
    expected = {i for i in variant_ids() if not inapplicable(i, the_task)}
    assert present == expected - set(hidden_on(task))  # masked by its designs, as calibrated
    for p in points[1:]:
        fault, variant = find(p.variant)
        if fault.name in HELD_OUT.names():
            assert p.level == ("fixed" if variant.severity is None else "canonical")
            assert p.condition.held_out
        elif variant.severity is None:
            assert p.level == "fixed"
        else:
            assert p.level in (*LEVELS, "canonical")
    calibrated = [p for p in points if p.level in LEVELS]
    assert len({(p.variant, p.level) for p in calibrated}) == len(calibrated)


def test_selection_keeps_healthy_and_only_what_is_asked() -> None:
    points = grid_points(DIGITS, "full", faults=["lr_too_high"], levels=["mild"])
    assert points[0].condition.name == HEALTHY
    assert {p.variant.partition(".")[0] for p in points[1:]} == {"lr_too_high"}
    assert {p.level for p in points[1:]} == {"mild"}
    bare = grid_points(DIGITS, "full", variants=["requires_grad"])
    assert [p.variant for p in bare[1:]] == ["frozen_layer.requires_grad"]


@pytest.mark.parametrize(
    ("kwargs", "wrong", "nearest"),
    [
        ({"grid": "clasic"}, "grid 'clasic'", "classic"),
        ({"faults": ["lr_too_hihg"]}, "fault 'lr_too_hihg'", "lr_too_high"),
        ({"variants": ["requires_grads"]}, "variant 'requires_grads'", None),
        ({"levels": ["mid"]}, "level 'mid'", "mild"),
    ],
)
def test_unknown_selection_is_one_clear_error(kwargs, wrong: str, nearest: str | None) -> None:
    grid = kwargs.pop("grid", "full")
    with pytest.raises(FaultbenchError, match=wrong) as err:
        grid_points(DIGITS, grid, **kwargs)
    if nearest:
        assert f"Did you mean '{nearest}'" in str(err.value)


@pytest.mark.parametrize(
    "argv",
    [["--grid", "clasic"], ["--faults", "lr_too_hihg"], ["--levels", "mid"]],
)
def test_cli_refuses_a_bad_selection_before_work(tmp_path: Path, argv: list[str]) -> None:
    shown = _cli(
        "run", "--diagnoser", "rules", "--task", "digits", "--store", str(tmp_path / "s"), *argv
    )
    assert shown.returncode == 2
    assert len(shown.stderr.strip().splitlines()) == 1, shown.stderr
    assert not (tmp_path / "s").exists() or not any((tmp_path / "s").rglob("*.npz"))


# -- the level rule and the effect ---------------------------------------------------


def _points(*pairs: tuple[float, float]) -> list[SweepPoint]:
    return [SweepPoint("x", float(i), share, eff) for i, (share, eff) in enumerate(pairs)]


def test_levels_are_visible_and_grow_by_the_step() -> None:
    # Not visible in every seed: skipped. Mild: 2 (the mildest visible). Severe: 30, the
    # first within 5% of the largest effect 31. Moderate: between them, 1.2x from both
    # (2.2 is too close to mild), nearest the log-middle sqrt(2 * 30) = 7.75: 11 rather than
    # 5 (|ln 11 - ln 7.75| = 0.35 against 0.44).
    chosen = choose_levels(
        _points(
            (0.5, 50.0), (1.0, 2.0), (1.0, 2.2), (1.0, 5.0), (1.0, 11.0), (1.0, 30.0), (1.0, 31.0)
        )
    )
    assert {k: v.effect for k, v in chosen.items()} == {
        "mild": 2.0,
        "moderate": 11.0,
        "severe": 30.0,
    }
    effects = [chosen[name].effect for name in LEVELS]
    assert all(b >= STEP * a for a, b in itertools.pairwise(effects))
    severities = [chosen[name].severity for name in LEVELS]
    assert severities == sorted(severities)  # the knob's order too


def test_too_few_visible_severities_give_fewer_levels() -> None:
    assert choose_levels(_points((0.5, 9.0), (0.0, 1.0))) == {}
    assert list(choose_levels(_points((1.0, 4.0), (1.0, 4.1)))) == ["severe"]
    assert list(choose_levels(_points((1.0, 4.0), (1.0, 40.0)))) == ["mild", "severe"]
    assert list(choose_levels(_points((1.0, 4.0), (1.0, 4.5), (1.0, 40.0)))) == ["mild", "severe"]


def test_effect_is_the_largest_z_of_any_signal(digits_grid) -> None:
    healthy = [
        (digits_grid[(HEALTHY, s)].trace, digits_grid[(HEALTHY, s)].config) for s in range(3)
    ]
    run = digits_grid[("huge_inputs", 0)]
    base = np.array([[signals(t, c)[k] for k in SIGNALS] for t, c in healthy])
    value = np.array([signals(run.trace, run.config)[k] for k in SIGNALS])
    mean, sd = base.mean(axis=0), base.std(axis=0, ddof=1)
    sd = np.maximum(np.maximum(sd, 0.01 * np.abs(mean) + 1e-9), 0.01)
    z = [abs(v - m) / s for v, m, s in zip(value, mean, sd) if math.isfinite(m)]
    expected = min(1000.0, max(x if math.isfinite(x) else 1000.0 for x in z))
    assert effect(run.trace, run.config, healthy) == pytest.approx(expected)
    assert effect(*healthy[0], healthy) < effect(run.trace, run.config, healthy)


# -- calibration -----------------------------------------------------------------------


def test_calibrate_one_variant_writes_levels_that_reread(
    tmp_path: Path, trainer: SerialEngine
) -> None:
    # diabetes: the task of the cheapest runs (a calibration trains about 40), whose
    # committed levels this one must reproduce.
    diabetes = get_task("diabetes")
    store = Store(tmp_path / "s")
    levels, sweep = calibrate(diabetes, store=store, engine=trainer, variants=["lr_too_high"])
    knob = find("lr_too_high")[1].severity
    assert knob is not None
    assert [p.severity for p in sweep] == knob.grid()
    assert levels and {lv.level for lv in levels} <= set(LEVELS)
    assert all(lv.visible_share >= VISIBLE_SHARE for lv in levels)
    path = write_levels(levels, tmp_path / "levels.csv")
    reread = load_levels(path)
    assert [(lv.variant, lv.level, lv.severity) for lv in reread] == [
        (lv.variant, lv.level, lv.severity) for lv in levels
    ]  # the rule names them mildest first, as the file keeps them
    assert [lv.effect for lv in reread] == pytest.approx([lv.effect for lv in levels], rel=1e-3)
    again, _ = calibrate(diabetes, store=store, variants=["lr_too_high"])  # stored: trains nothing
    assert again == levels
    committed = [lv for lv in load_levels() if (lv.task, lv.variant) == ("diabetes", "lr_too_high")]
    assert [(lv.level, lv.severity, lv.seeds, lv.code) for lv in levels] == [
        (lv.level, lv.severity, lv.seeds, lv.code) for lv in committed
    ]


def test_writing_the_levels_a_file_holds_leaves_its_folder_alone(tmp_path: Path) -> None:
    levels = [Level("digits", "lr_too_high", "mild", 11.0, 148.7, 1.0, "1000 1001 1002")]
    path = write_levels(levels, tmp_path / "levels.csv")
    os.utime(tmp_path, ns=(0, 0))  # the Makefile reinstalls when a package folder changes
    assert write_levels(levels, path) == path
    assert tmp_path.stat().st_mtime_ns == 0 and sorted(os.listdir(tmp_path)) == ["levels.csv"]
    write_levels([replace(levels[0], severity=60.0)], path)  # other levels: rewritten
    assert [lv.severity for lv in load_levels(path)] == [60.0]


def test_calibrate_cli_refuses_an_unknown_task(tmp_path: Path) -> None:
    shown = _cli("calibrate", "--task", "digit", "--out", str(tmp_path / "l.csv"))
    assert shown.returncode == 2 and "Did you mean 'digits'" in shown.stderr
    assert not (tmp_path / "l.csv").exists()


# -- the committed levels on digits ---------------------------------------------------


def _digits_levels() -> list[Level]:
    return [lv for lv in load_levels() if lv.task == "digits" and lv.level in LEVELS]


def test_levels_file_holds_known_knob_variants_and_the_fixed_ones_visibility() -> None:
    assert {lv.variant for lv in _digits_levels()} <= set(knob_variants(DIGITS))
    assert all(lv.variant.partition(".")[0] in FAULTS.names() for lv in load_levels())
    for task in task_names():
        fixed = {lv.variant for lv in load_levels() if lv.task == task and lv.level == FIXED}
        hidden = set(hidden_on(task))
        assert fixed == set(fixed_variants(get_task(task))) - hidden, task
        levelled = {lv.variant for lv in load_levels() if lv.task == task and lv.level in LEVELS}
        assert not hidden & levelled, task


#: Drawn healthy bases the levels' runs are compared with (as many as the calibration's).
HEALTHY_BASES = 10


@pytest.fixture(scope="module")
def level_runs(shared_store_root: Path, trainer: SerialEngine):
    """Every digits level on the drawn bases of the scored seeds (not the calibration's)."""
    store = Store(shared_store_root)
    kept = plan(
        DIGITS,
        "full",
        seeds=SIGNAL_SEEDS,
        healthy_seeds=HEALTHY_BASES,
        faults=FAULTS.names(),
        levels=list(LEVELS),
        store=store,
        engine=trainer,
        progress=False,
    )
    found = ensure_records(kept.specs, DIGITS, store=store, engine=trainer, progress=False)
    records = dict((spec, record) for spec, record, _ in found)
    return [(point, records[spec]) for point, spec in kept.runs]


def test_each_digits_level_manifests_on_drawn_bases_and_effect_grows(level_runs) -> None:
    from faultbench.scoring.manifest import manifestation

    healthy = [(r.trace, r.config) for p, r in level_runs if p.condition.name == HEALTHY]
    assert len(healthy) == HEALTHY_BASES
    runs: dict[tuple[str, str], list] = {}
    for point, record in level_runs:
        if point.level in LEVELS:
            runs.setdefault((point.variant, point.level), []).append(record)
    assert {v for v, _ in runs} == {lv.variant for lv in _digits_levels()}
    by_variant: dict[str, dict[str, float]] = {}
    for (variant, level), records in runs.items():
        shown = [not r.ok or manifestation(r.trace, r.config, healthy).visible for r in records]
        assert np.mean(shown) >= 2 / 3, f"{variant} {level}: {shown}"
        effects = [1000.0 if not r.ok else effect(r.trace, r.config, healthy) for r in records]
        by_variant.setdefault(variant, {})[level] = float(np.median(effects))
    for variant, effects in by_variant.items():
        # The starved loader's levels too: each waits its share of the step, on a busy
        # machine as on a quiet one (tests/test_loading.py).
        # At the two significant digits levels are compared at (a saturated effect's
        # medians, 86.4 and 86.1, are one value).
        ordered = [effect_at_precision(effects[name]) for name in LEVELS if name in effects]
        # Each level's runs are on the same bases, the first the variant applies to.
        assert ordered == sorted(ordered), f"{variant}: {effects}"


def test_levels_are_compared_at_two_significant_digits() -> None:
    assert effect_at_precision(20.449) == effect_at_precision(20.051) == 20.0
    assert effect_at_precision(0.0123456) == 0.012
    noisy = [
        SweepPoint("x", float(i), 1.0, effect_at_precision(e))
        for i, e in enumerate((2.0004, 5.0, 11.0003, 30.0, 30.9))
    ]
    exact = [SweepPoint("x", float(i), 1.0, e) for i, e in enumerate((2.0, 5.0, 11.0, 30.0, 31.0))]
    assert choose_levels(noisy) == choose_levels(exact)  # last digits cannot move a level


def test_the_committed_levels_and_rates_were_measured_on_this_code() -> None:
    for task in task_names():
        the_task = get_task(task)
        stale = [
            (lv.variant, lv.level)
            for lv in load_levels()
            if lv.task == task and lv.code != measured_on(the_task, lv.variant)
        ]
        assert not stale, f"{task}: levels measured on other code ({stale[:3]}...): make calibrate"
        rates = {p.code for p in load_rates() if p.task == task}
        assert rates == {rates_measured_on(the_task)}, f"{task}: rates stale: make calibrate"


def test_run_json_reports_scores_per_level_with_intervals(shared_store_root: Path) -> None:
    # The shared store: its digits level runs (seed 0) are these, trained once for both
    # tests; serial, as a pool's start would cost more than the runs this may train.
    shown = _cli(
        "run", "--diagnoser", "rules", "--task", "digits", "--seeds", "1", "--json",
        "--faults", "lr_too_high,label_noise", "--store", str(shared_store_root),
        "--engine", "serial", "--healthy-seeds", "2",
    )  # fmt: skip
    assert shown.returncode == 0, shown.stderr
    report = json.loads(shown.stdout)
    assert report["grid"] == "full"
    scores = report["scores"]
    by_level = scores["identification"]["by_level"]
    assert set(by_level) <= {*LEVELS, "canonical"} and by_level
    for cell in [*by_level.values(), scores["false_alarms"], *scores["detection"].values()]:
        assert cell["n"] >= 1 and cell["low"] <= cell["value"] <= cell["high"]
    assert scores["detection"]["not_healthy"]["n"] == 1  # one held-out fault, one seed
    assert scores["false_alarms"]["n"] == 2
    runs = {(r["variant"], r["level"]) for r in report["runs"]}
    assert ("label_noise", "canonical") in runs and ("", "") in runs
