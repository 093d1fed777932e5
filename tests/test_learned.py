"""The learned diagnoser: features, a deterministic fit, and conformance.

Fitting on the shared digits grid (seeds 0..2) here is only a test of the
mechanics; the shipped diagnoser trains on seeds disjoint from evaluation.
"""

from __future__ import annotations

import numpy as np
import pytest

from conftest import DIGITS_CONDITIONS
from faultbench.diagnosers import learned
from faultbench.diagnosers.learned import FEATURES, TRAIN_SEEDS, LearnedDiagnoser, features
from faultbench.scoring.evaluate import run_for
from faultbench.tasks.task import get_task
from faultbench.tools.checks import make_run, parametrize_checks
from faultbench.training.engine import SerialEngine

EVALUATION_SEEDS = range(5)


@pytest.fixture(scope="module")
def fitted(digits_grid) -> LearnedDiagnoser:
    """A forest fitted on seeds 0 and 1 of the shared grid."""
    return LearnedDiagnoser().fit(r for (_, seed), r in digits_grid.items() if seed < 2)


def test_training_seeds_are_disjoint_from_evaluation_seeds() -> None:
    assert not set(TRAIN_SEEDS) & set(EVALUATION_SEEDS)
    assert LearnedDiagnoser().tuned_on == {"digits"}


@pytest.mark.parametrize("name", DIGITS_CONDITIONS)
def test_features_are_finite_and_complete(digits_grid, name: str) -> None:
    x = features(run_for(digits_grid[(name, 0)], get_task("digits")))
    assert x.shape == (len(FEATURES),)
    assert np.all(np.isfinite(x))


@pytest.mark.parametrize("name", DIGITS_CONDITIONS)
def test_waiting_is_a_mark_not_the_wall_clock_share(digits_grid, name: str) -> None:
    """A run's wait share moves between two trainings of it; the feature does not."""
    for seed in range(3):
        run = run_for(digits_grid[(name, seed)], get_task("digits"))
        mark = features(run)[FEATURES.index("starving")]
        assert mark == (1.0 if name == "starved_loader" else 0.0), run.trace.wait_share


def test_features_of_a_diverged_run_are_finite() -> None:
    x = features(make_run("healthy", diverged=True))
    assert np.all(np.isfinite(x))
    assert x[FEATURES.index("nonfinite_share")] > 0


def test_unseen_seed_is_mostly_named_right(fitted: LearnedDiagnoser, digits_grid) -> None:
    task = get_task("digits")
    answers = {n: fitted.diagnose(run_for(digits_grid[(n, 2)], task)) for n in DIGITS_CONDITIONS}
    right = [n for n, d in answers.items() if d.label == n]
    assert len(right) >= 8, {n: d.label for n, d in answers.items()}
    assert answers["healthy"].label == "healthy"
    assert all(0 < d.confidence <= 1 for d in answers.values() if d.confidence is not None)


def test_fit_is_deterministic(digits_grid) -> None:
    records = [r for (_, seed), r in digits_grid.items() if seed < 2]
    task = get_task("digits")
    runs = [run_for(digits_grid[(n, 2)], task) for n in DIGITS_CONDITIONS]
    first, second = LearnedDiagnoser().fit(records), LearnedDiagnoser().fit(reversed(records))
    assert [first.diagnose(r) for r in runs] == [second.diagnose(r) for r in runs]


@parametrize_checks(LearnedDiagnoser(seeds=(100,), engine=SerialEngine()))
def test_learned_passes_the_checks(diagnoser, check, monkeypatch: pytest.MonkeyPatch) -> None:
    # One training seed and one healthy drawn base keep the first-use training to a score
    # of short-lived runs, in this process: a pool's start costs more than they do. The
    # checks test the diagnoser's contract, not its forest's skill (the leaderboard's), so
    # a forest fitted on fewer runs does; its 30 healthy drawn bases were 45 s of the
    # suite's time. It trains before the checks, as evaluate() has it do, outside the
    # per-diagnosis time limit.
    monkeypatch.setattr(learned, "HEALTHY_SEEDS", (101,))
    diagnoser.prepare()
    check(diagnoser)
