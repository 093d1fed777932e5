"""The learned diagnoser: features, a deterministic fit, its alarm held to the budget, and
conformance.

Fitting on the shared digits grid (seeds 0..2) here is only a test of the
mechanics; the shipped diagnoser trains on seeds disjoint from evaluation.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from conftest import DIGITS_CONDITIONS
from faultbench.diagnosers.learned import (
    FEATURES,
    NOT_APPLICABLE,
    TRAINING,
    Example,
    LearnedDiagnoser,
    TrainingSeeds,
    calibrate_alarm,
    features,
    out_of_fold_alarm_scores,
)
from faultbench.diagnosers.rules import RulesDiagnoser
from faultbench.faults.fault import Condition
from faultbench.scoring.budget import ANY_KIND, BUDGET, DIGITS
from faultbench.scoring.diagnosis import UNKNOWN
from faultbench.scoring.evaluate import run_for
from faultbench.scoring.plan import HEALTHY_SEEDS as SCORED_SEEDS
from faultbench.storage.bases import DATA_BOUND
from faultbench.storage.records import RunSpec
from faultbench.storage.runner import ensure_records
from faultbench.storage.store import Store
from faultbench.tasks.task import get_task
from faultbench.tools.calibrate import SEEDS as CALIBRATION_SEEDS
from faultbench.tools.checks import make_run, parametrize_checks
from faultbench.training.engine import SerialEngine

DEFAULT_PORT_SEEDS = range(200, 300)  # the DEFault port trains on these


@pytest.fixture(scope="module")
def fitted(digits_grid) -> LearnedDiagnoser:
    """A forest fitted on seeds 0 and 1 of the shared grid."""
    return LearnedDiagnoser().fit(r for (_, seed), r in digits_grid.items() if seed < 2)


def test_training_seeds_are_disjoint_from_every_other_use() -> None:
    for task, seeds in TRAINING.items():
        used = {*seeds.faults, *seeds.healthy}
        assert not used & set(range(SCORED_SEEDS)), task
        assert not used & set(DEFAULT_PORT_SEEDS), task
        assert not used & set(CALIBRATION_SEEDS), task
        # Fewer healthy drawn runs than this and the budget lets none exceed the threshold.
        assert math.floor(BUDGET * len(seeds.healthy) + 1e-9) >= 1, task


def test_it_is_tuned_on_the_tasks_rules_is() -> None:
    assert LearnedDiagnoser().tuned_on == RulesDiagnoser().tuned_on
    assert LearnedDiagnoser(training={"digits": TRAINING["digits"]}).tuned_on == {"digits"}


@pytest.mark.parametrize("name", DIGITS_CONDITIONS)
def test_features_are_finite_and_complete(fitted: LearnedDiagnoser, digits_grid, name: str) -> None:
    x = fitted.features(run_for(digits_grid[(name, 0)], get_task("digits")))
    assert x.shape == (len(FEATURES),)
    assert np.all(np.isfinite(x))


def test_waiting_is_a_mark_against_the_healthy_runs_it_was_fitted_on(
    fitted: LearnedDiagnoser, digits_grid
) -> None:
    """A run's wait share moves between two trainings of it; the feature does not: it says
    whether the run waited longer than every healthy run the forest was fitted on, and than
    half the bound of data-bound, under which the family keeps every healthy run."""
    task = get_task("digits")
    healthy = [run_for(digits_grid[("healthy", seed)], task).trace.wait_share for seed in (0, 1)]
    assert fitted.waiting == max(*healthy, DATA_BOUND / 2)
    for (name, seed), record in digits_grid.items():
        mark = fitted.features(run_for(record, task))[FEATURES.index("starving")]
        assert mark in (0.0, 1.0)
        if name == "starved_loader":
            assert mark == 1.0, (seed, fitted.waiting)
        if name == "healthy" and seed < 2:
            assert mark == 0.0


def test_features_of_a_diverged_run_are_finite() -> None:
    x = features(make_run("healthy", diverged=True), math.nan)
    assert np.all(np.isfinite(x))
    assert x[FEATURES.index("nonfinite_share")] > 0


def test_a_regression_has_no_class_features(tmp_path) -> None:
    """A squared error has no probability floor and a regression no classes: those features
    say so, apart from every real value, rather than reading as a classifier's."""
    task = get_task("diabetes")
    spec = RunSpec(task.name, task.fingerprint, Condition(), 0)
    [(_, record, _)] = ensure_records(
        [spec], task, store=Store(tmp_path, runs=None), engine=SerialEngine()
    )
    x = features(run_for(record, task), math.nan)
    assert np.all(np.isfinite(x))
    assert x[FEATURES.index("min_loss_over_probability_floor")] == NOT_APPLICABLE
    assert x[FEATURES.index("min_width_over_classes")] == NOT_APPLICABLE
    assert 0.0 < x[FEATURES.index("val_score_above_chance")] <= 1.0  # an R² above 0


def _examples(rng: np.random.Generator, seeds: range, kind: str) -> list[Example]:
    """Healthy drawn runs near 0 and faulty ones near 3, one of each per seed."""
    return [
        Example(rng.normal(centre, 1.0, size=3), label, seed, kind, label == "healthy")
        for seed in seeds
        for label, centre in (("healthy", 0.0), ("lr_too_high", 3.0))
    ]


def test_the_alarm_lets_the_budget_of_healthy_runs_exceed_it() -> None:
    rng = np.random.default_rng(0)
    examples = _examples(rng, range(40), "multiclass") + _examples(rng, range(40, 80), "regression")
    scores = [float(f"{s:.{DIGITS}g}") for s in out_of_fold_alarm_scores(examples)]  # as stored
    found = calibrate_alarm(examples)
    assert set(found) == {"multiclass", "regression", ANY_KIND}
    for kind, calibration in found.items():
        healthy = [
            s
            for e, s in zip(examples, scores, strict=True)
            if e.calibrates and kind in (e.kind, ANY_KIND)
        ]
        above = sum(s > calibration.threshold for s in healthy)
        assert len(healthy) == (80 if kind == ANY_KIND else 40)
        assert above <= math.floor(BUDGET * len(healthy)), kind
        assert calibration.threshold in healthy


def test_out_of_fold_scores_come_from_forests_without_the_runs_seed() -> None:
    """A healthy run unlike every other healthy run: in-sample the forest has learned it, out
    of fold it looks like nothing healthy."""
    rng = np.random.default_rng(1)
    examples = _examples(rng, range(20), "multiclass")
    odd = Example(np.full(3, 3.0), "healthy", 99, "multiclass", True)  # where the faults lie
    scores = out_of_fold_alarm_scores([*examples, odd])
    assert scores[-1] > np.median(scores[:-1:2])  # the healthy ones'


def test_unseen_seed_is_mostly_named_right(fitted: LearnedDiagnoser, digits_grid) -> None:
    task = get_task("digits")
    answers = {n: fitted.diagnose(run_for(digits_grid[(n, 2)], task)) for n in DIGITS_CONDITIONS}
    right = [n for n, d in answers.items() if d.label == n]
    assert len(right) >= 8, {n: d.label for n, d in answers.items()}
    assert answers["healthy"].label == "healthy"
    assert all(0 < d.confidence <= 1 for d in answers.values() if d.confidence is not None)


def test_it_alarms_exactly_above_its_threshold(fitted: LearnedDiagnoser, digits_grid) -> None:
    task = get_task("digits")
    for name in DIGITS_CONDITIONS:
        answer = fitted.diagnose(run_for(digits_grid[(name, 2)], task))
        above = answer.evidence["alarm_score"] > answer.evidence["threshold"]
        assert (answer.label != "healthy") == above, (name, answer.evidence)
        if answer.label == UNKNOWN:  # an alarm that names nothing: the vote was healthy's
            assert answer.evidence["alarm_score"] < 0.5


def test_fit_is_deterministic(digits_grid) -> None:
    records = [r for (_, seed), r in digits_grid.items() if seed < 2]
    task = get_task("digits")
    runs = [run_for(digits_grid[(n, 2)], task) for n in DIGITS_CONDITIONS]
    first, second = LearnedDiagnoser().fit(records), LearnedDiagnoser().fit(reversed(records))
    assert [first.diagnose(r) for r in runs] == [second.diagnose(r) for r in runs]


# One task, one training seed and one healthy drawn base keep the first-use training to a
# score of short-lived runs, in this process: a pool's start costs more than they do. The
# checks test the diagnoser's contract, not its forest's skill (the leaderboard's).
@parametrize_checks(
    LearnedDiagnoser(training={"digits": TrainingSeeds((100,), (101,))}, engine=SerialEngine())
)
def test_learned_passes_the_checks(diagnoser, check) -> None:
    # It trains before the checks, as evaluate() has it do, outside the per-diagnosis limit.
    diagnoser.prepare()
    check(diagnoser)
