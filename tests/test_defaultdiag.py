"""The DEFault port: the contract, a deterministic fit, training seeds apart from scored ones,
and answers with the features that decided.

The port is fitted here on one tuned-on task (diabetes) and one seed, the fewest runs that
exercise every stage; the shipped port learns from three tasks and more seeds.
"""

from __future__ import annotations

import numpy as np
import pytest

import faultbench
from faultbench.diagnosers import defaultdiag
from faultbench.diagnosers.defaultdiag import (
    CATEGORY,
    FEATURES,
    NOT_TRAINED,
    DefaultPort,
    features,
)
from faultbench.faults.fault import labels
from faultbench.scoring.diagnosis import get_diagnoser
from faultbench.storage.records import RunRecord
from faultbench.storage.store import Store
from faultbench.tools.checks import make_run, run_checks
from faultbench.training.engine import SerialEngine

SCORED_SEEDS = range(50)  # every seed a board's grid scores
OWN_SEEDS = range(200, 300)  # the port's, which the other learned diagnosers leave alone
TASK = "diabetes"
SEED = 200


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Store:
    return Store(tmp_path_factory.mktemp("default-port"))


def _small(store: Store) -> DefaultPort:
    return DefaultPort(
        seeds=(SEED,), healthy_seeds=(), tasks=(TASK,), store=store, engine=SerialEngine()
    )


@pytest.fixture(scope="module")
def records(store: Store) -> list[tuple[str, RunRecord]]:
    return _small(store).training_records()


@pytest.fixture(scope="module")
def fitted(store: Store, records: list[tuple[str, RunRecord]]) -> DefaultPort:
    return _small(store).fit(records)


def test_it_is_registered_as_a_port_tuned_on_the_rules_tasks() -> None:
    port = get_diagnoser("default-port")
    assert port.name == "default-port"
    assert port.tuned_on == {"diabetes", "digits", "numbers"}
    assert get_diagnoser("rules").tuned_on == port.tuned_on


def test_every_known_fault_has_a_category_or_a_reason_it_is_not_trained() -> None:
    faults = set(labels()) - {"healthy", "other_fault"}
    assert set(CATEGORY) | NOT_TRAINED == faults
    assert not set(CATEGORY) & NOT_TRAINED
    named = {c for c in CATEGORY.values() if c}
    assert named <= {"hyperparameter", "layer", "loss", "optimization", "activation", "weights"}


def test_its_seeds_are_its_own_apart_from_every_scored_seed() -> None:
    seeds = {*defaultdiag.TRAIN_SEEDS, *defaultdiag.HEALTHY_SEEDS}
    assert seeds <= set(OWN_SEEDS)
    assert not seeds & set(SCORED_SEEDS)


def test_it_trains_on_no_scored_seed(records: list[tuple[str, RunRecord]]) -> None:
    specs = [r.spec for _, r in records]
    assert {s.seed for s in specs} == {SEED}
    assert {s.task for s in specs} == {TASK}
    trained = {s.condition.name for s in specs}
    assert "healthy" in trained and "lr_too_high" in trained
    assert not trained & NOT_TRAINED


def test_features_are_complete_and_a_diverged_run_keeps_its_first_half() -> None:
    healthy = features(make_run("healthy"))
    assert healthy.shape == (len(FEATURES),)
    assert np.all(np.isfinite(healthy))
    diverged = dict(zip(FEATURES, features(make_run("healthy", diverged=True)), strict=True))
    # Past the middle every gradient is NaN: the epochs there have no gradient statistics,
    # and the mean over the first half's stays finite.
    assert np.isfinite(diverged["gradient_median"])


def test_the_contract_checks_pass(fitted: DefaultPort) -> None:
    failed = [(r.name, r.message) for r in run_checks(fitted) if not r.passed]
    assert not failed


def test_the_fit_is_deterministic(
    store: Store, records: list[tuple[str, RunRecord]], fitted: DefaultPort
) -> None:
    again = _small(store).fit(list(reversed(records)))
    for fault in ("healthy", "lr_too_high", "dead_units"):
        run = make_run(fault)
        assert fitted.diagnose(run) == again.diagnose(run)


def test_on_a_classic_grid_it_answers_a_label_with_the_features_that_decided(
    fitted: DefaultPort, store: Store
) -> None:
    report = faultbench.evaluate(
        fitted, TASK, grid="classic", seeds=1, store=store, engine=SerialEngine(), isolate=False
    )
    assert report.results
    for result in report.results:
        assert result.status == "ok", result.message
        assert result.predicted in labels(), result.predicted
        decided = result.evidence["detection_features"]
        assert decided and set(decided) <= set(FEATURES)
        if result.predicted not in ("healthy", "other_fault"):
            assert set(result.evidence["cause_features"]) <= set(FEATURES)
            assert CATEGORY[result.predicted] == result.evidence["category"]
    # Seen on another seed of the same task, a learning rate 100 times too high is found.
    by_condition = {r.condition: r.predicted for r in report.results}
    assert by_condition["lr_too_high"] != "healthy", by_condition
