"""Each rule fires on its fault's runs and stays silent on healthy ones (digits, seeds 0..2)."""

from __future__ import annotations

import pytest
import torch.nn.functional as F

from conftest import CLASSIFIER_FAULTS, DIGITS_CONDITIONS
from faultbench.diagnosers import _features, rules
from faultbench.scoring.diagnosis import get_diagnoser
from faultbench.scoring.evaluate import run_for
from faultbench.scoring.harness import diagnose_safely
from faultbench.scoring.memorize import memorize
from faultbench.scoring.run import Run
from faultbench.storage.records import RunRecord
from faultbench.tasks.task import get_task

SEEDS = (0, 1, 2)

#: The passive rule that names each fault; lr_too_high and softmax_before_loss
#: have candidate rules that the memorization probe confirms.
RULE_OF = {
    "huge_inputs": rules.loss_at_start,
    "starved_loader": rules.data_wait,
    "frozen_layer": rules.frozen_layer,
    "dead_units": rules.no_gradient,
    "too_small_model": rules.narrow_layer,
    "label_mismatch": rules.labels_disagree,
    "missing_zero_grad": rules.accumulating_gradient,
    "lr_too_high": rules.unstable,
    "softmax_before_loss": rules.loss_floor,
}


def _run(grid: dict[tuple[str, int], RunRecord], name: str, seed: int) -> Run:
    return run_for(grid[(name, seed)], get_task("digits"))


def test_every_fault_has_a_rule() -> None:
    assert set(RULE_OF) == set(CLASSIFIER_FAULTS)


@pytest.mark.parametrize("fault", CLASSIFIER_FAULTS)
@pytest.mark.parametrize("seed", SEEDS)
def test_rule_fires_on_its_fault(digits_grid, fault: str, seed: int) -> None:
    finding = RULE_OF[fault](_run(digits_grid, fault, seed))
    assert finding.fired, finding.evidence


@pytest.mark.parametrize("fault", CLASSIFIER_FAULTS)
@pytest.mark.parametrize("seed", SEEDS)
def test_rule_silent_on_healthy(digits_grid, fault: str, seed: int) -> None:
    finding = RULE_OF[fault](_run(digits_grid, "healthy", seed))
    assert not finding.fired, finding.evidence


@pytest.mark.parametrize("seed", SEEDS)
def test_probe_memorizes_healthy_model_cheaply(digits_grid, seed: int) -> None:
    run = _run(digits_grid, "healthy", seed)
    memo = memorize(run.probe)
    assert memo.memorized and memo.rate is not None
    assert memo.steps == run.probe.steps_used < run.trace.steps


def test_a_stored_runs_probe_is_asked_once_and_each_diagnosis_is_charged_its_steps(
    digits_grid,
) -> None:
    from faultbench.scoring import memorize as _probe
    from faultbench.scoring.run import Probe

    _probe._FOUND.clear()
    first, again = _run(digits_grid, "lr_too_high", 0), _run(digits_grid, "lr_too_high", 0)
    assert first.probe is not None and again.probe is not None and first.probe.key
    memo = memorize(first.probe)
    calls = []
    again.probe.loss = lambda *a: calls.append(a)  # type: ignore[method-assign]
    assert memorize(again.probe) == memo and calls == []  # not trained a second time
    assert again.probe.steps_used == first.probe.steps_used == memo.steps > 0
    other = _run(digits_grid, "lr_too_high", 1)  # another run: asked afresh
    assert other.probe is not None and memorize(other.probe).steps == other.probe.steps_used
    # a user's probe has no key: nothing is reused for it
    X, y = first.probe.train_data()
    user = Probe.from_user(first.probe.make_model, F.cross_entropy, X, y)
    assert user.key == "" and memorize(user) == memo and user.steps_used == memo.steps


def test_probe_cannot_memorize_through_a_softmax_head(digits_grid) -> None:
    run = _run(digits_grid, "softmax_before_loss", 0)
    memo = memorize(run.probe)
    assert not memo.memorized
    assert memo.best_loss >= _features.softmax_floor(10) * (1 - rules.FLOOR_SLACK)


@pytest.mark.parametrize("name", DIGITS_CONDITIONS)
def test_rules_names_each_canonical_condition(digits_grid, name: str) -> None:
    diagnoser = get_diagnoser("rules")
    for seed in SEEDS:
        outcome = diagnose_safely(diagnoser, _run(digits_grid, name, seed))
        assert outcome.status == "ok", outcome.message
        assert outcome.label == name, outcome.evidence
        assert outcome.evidence["decided_by"]
        assert outcome.probe_steps < 600


def test_softmax_floor_matches_known_value() -> None:
    # ln(1 + 9/e) for ten classes, the floor the digits softmax run sits on.
    assert _features.softmax_floor(10) == pytest.approx(1.4611, abs=1e-4)
