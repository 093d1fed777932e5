"""The registries: names, duplicates, nearest-name errors."""

from __future__ import annotations

import re

import pytest

from conftest import CLASSIFIER_FAULTS
from faultbench.core.errors import FaultbenchError
from faultbench.core.registry import Registry
from faultbench.faults.fault import FAULTS, condition, condition_names


@pytest.fixture
def registry() -> Registry[int]:
    """A fresh registry for throwaway entries."""
    return Registry("widget")


def test_register_twice_raises(registry: Registry[int]) -> None:
    registry.add("a", 1)
    with pytest.raises(ValueError, match=re.escape("widget 'a' is already registered")):
        registry.add("a", 2)
    assert registry.get("a") == 1


def test_unknown_name_suggests_nearest(registry: Registry[int]) -> None:
    registry.add("alpha", 1)
    registry.add("beta", 2)
    with pytest.raises(
        FaultbenchError,
        match=re.escape("Unknown widget 'alpah'. Did you mean 'alpha'? Valid: alpha, beta"),
    ):
        registry.get("alpah")


def test_nine_classifier_faults_six_language_model_faults_and_healthy() -> None:
    assert len(FAULTS) == 15 and len(CLASSIFIER_FAULTS) == 9
    assert condition_names()[0] == "healthy" and len(condition_names()) == 16


@pytest.mark.parametrize("fault", FAULTS.names())
def test_fault_severity_is_documented(fault: str) -> None:
    spec = FAULTS.get(fault)
    assert spec.summary
    if spec.severity is not None:
        assert spec.severity.low <= spec.severity.canonical <= spec.severity.high
        assert condition(fault).faults == ((fault, spec.severity.canonical),)
    else:
        assert condition(fault).faults == ((fault, None),)


def test_faults_compose() -> None:
    pair = condition("huge_inputs", ("lr_too_high", 10.0))
    assert pair.name == "huge_inputs+lr_too_high"
    assert pair.labels == {"huge_inputs", "lr_too_high"}
    from faultbench.faults.fault import base_setup
    from faultbench.tasks.task import get_task

    task = get_task("digits")
    setup = pair.apply(base_setup(task, 0))
    assert setup.lr == pytest.approx(task.defaults.lr * 10)
    assert abs(setup.X_train).max() > 100 * abs(task.X_train).max()
