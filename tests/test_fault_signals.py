"""Each canonical fault shows its signature on digits, against healthy, in every seed."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pytest

from conftest import CLASSIFIER_FAULTS, SIGNAL_SEEDS
from faultbench.storage.records import RunRecord
from faultbench.training.trace import Trace

LN_C = math.log(10)  # digits has 10 classes
CHANCE = 0.1


def _late_spikes(t: Trace) -> int:
    """Steps after the first 100 whose loss is back above ln C (a model at chance)."""
    return int((np.nan_to_num(t.loss[100:], nan=np.inf) > LN_C).sum())


def _growth(t: Trace) -> float:
    """Mean gradient norm of the last 50 steps over the first 10."""
    g = t.grad_norm["hidden"]
    return float(g[-50:].mean() / g[:10].mean())


def check_missing_zero_grad(t: Trace, healthy: Trace) -> None:
    assert _growth(t) > 3.0 and _growth(healthy) < 1.0
    assert t.val_acc[-1] > 0.8  # still reaches a good score: the silent part


def check_huge_inputs(t: Trace, healthy: Trace) -> None:
    assert t.loss[0] > 10 * LN_C
    assert 0.5 * LN_C < healthy.loss[0] < 2 * LN_C
    assert t.val_acc[-1] > 0.8  # Adam absorbs it: only the first loss tells


def check_lr_too_high(t: Trace, healthy: Trace) -> None:
    assert _late_spikes(t) >= 20 and _late_spikes(healthy) == 0


def check_dead_units(t: Trace, healthy: Trace) -> None:
    assert t.inactive_share.mean() > 0.5 and healthy.inactive_share.mean() < 0.1
    dead = t.no_grad_weights["hidden"] / t.weight_count["hidden"]
    assert dead > 0.5 > healthy.no_grad_weights["hidden"] / healthy.weight_count["hidden"]


def check_starved_loader(t: Trace, healthy: Trace) -> None:
    assert t.wait_share > 0.5 and healthy.wait_share < 0.3
    assert abs(t.val_acc[-1] - healthy.val_acc[-1]) < 0.02  # as accurate as healthy


def check_too_small_model(t: Trace, healthy: Trace) -> None:
    assert t.val_acc[-1] < healthy.val_acc[-1] - 0.3
    assert t.train_acc[-1] < 0.7  # it cannot even fit its training data


def check_label_mismatch(t: Trace, healthy: Trace) -> None:
    assert t.train_acc[-1] > 0.9  # fits its (shifted) training labels
    assert t.val_acc[-1] < 2 * CHANCE < healthy.val_acc[-1]


def check_softmax_before_loss(t: Trace, healthy: Trace) -> None:
    floor = math.log(1 + 9 / math.e)  # cross-entropy of a one-hot probability vector
    assert t.loss[-50:].min() >= floor - 1e-3
    assert healthy.loss[-50:].min() < floor / 2
    assert t.train_acc[-1] > 0.9  # accurate, but the loss cannot fall


def check_frozen_layer(t: Trace, healthy: Trace) -> None:
    assert t.weight_change["hidden"] == 0.0 and healthy.weight_change["hidden"] > 0.1
    assert (t.grad_norm["hidden"] > 0).all()  # it gets gradients, they are never applied
    assert (t.update_ratio["hidden"] == 0).all()


SIGNALS: dict[str, Callable[[Trace, Trace], None]] = {
    name: globals()[f"check_{name}"] for name in CLASSIFIER_FAULTS if f"check_{name}" in globals()
}


def test_every_fault_has_a_signal_check() -> None:
    assert sorted(SIGNALS) == sorted(CLASSIFIER_FAULTS)


@pytest.mark.parametrize("seed", range(SIGNAL_SEEDS))
@pytest.mark.parametrize("fault", CLASSIFIER_FAULTS)
def test_fault_signal_visible(
    fault: str, seed: int, digits_grid: dict[tuple[str, int], RunRecord]
) -> None:
    faulty, healthy = digits_grid[(fault, seed)], digits_grid[("healthy", seed)]
    assert faulty.ok and healthy.ok and faulty.trace and healthy.trace
    SIGNALS[fault](faulty.trace, healthy.trace)


@pytest.mark.parametrize("seed", range(SIGNAL_SEEDS))
def test_healthy_run_is_accurate(seed: int, digits_grid: dict[tuple[str, int], RunRecord]) -> None:
    trace = digits_grid[("healthy", seed)].trace
    assert trace is not None
    assert trace.val_acc[-1] >= 0.95
    assert trace.steps == 600 and len(trace.wait_seconds) == 600


def test_healthy_synthetic_is_accurate(synthetic_grid: dict[tuple[str, int], RunRecord]) -> None:
    for seed in range(SIGNAL_SEEDS):
        trace = synthetic_grid[("healthy", seed)].trace
        assert trace is not None and trace.val_acc[-1] >= 0.9
