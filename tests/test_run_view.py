"""Nothing reachable from the run handed to a diagnoser reveals its condition."""

from __future__ import annotations

import pickle
from typing import Any

import numpy as np
import pytest
import torch

from conftest import CLASSIFIER_FAULTS, DIGITS_CONDITIONS
from faultbench.scoring.evaluate import run_for
from faultbench.scoring.run import Run
from faultbench.storage.records import RunRecord
from faultbench.tasks.task import get_task

FORBIDDEN_TYPES = ("RunSpec", "RunRecord", "Recipe", "Condition", "Fault", "Variant", "Severity")


def _reachable(root: object) -> list[object]:
    """Every object reachable through attributes, containers and module state dicts."""
    seen: dict[int, object] = {}
    stack = [root]
    while stack:
        obj = stack.pop()
        if id(obj) in seen or isinstance(obj, (int, float, bool, type(None), np.ndarray)):
            continue
        if isinstance(obj, torch.Tensor):
            continue
        seen[id(obj)] = obj
        if isinstance(obj, dict):
            stack.extend(obj.keys())
            stack.extend(obj.values())
        elif isinstance(obj, (list, tuple, set, frozenset)):
            stack.extend(obj)
        elif hasattr(obj, "__dict__") and not isinstance(obj, type):
            stack.extend(vars(obj).values())
        if hasattr(obj, "__slots__"):
            stack.extend(getattr(obj, s) for s in obj.__slots__ if hasattr(obj, s))
    return list(seen.values())


def _strings(objs: list[Any]) -> set[str]:
    return {o for o in objs if isinstance(o, str)}


@pytest.mark.parametrize("name", DIGITS_CONDITIONS)
def test_run_reveals_no_condition(name: str, digits_grid: dict[tuple[str, int], RunRecord]) -> None:
    run = run_for(digits_grid[(name, 0)], get_task("digits"))
    objs = _reachable(run)
    faults = CLASSIFIER_FAULTS
    leaked = [s for s in _strings(objs) if any(f in s for f in faults)]
    assert leaked == []
    assert not [type(o).__name__ for o in objs if type(o).__name__ in FORBIDDEN_TYPES]
    text = repr(run) + repr(run.probe) + repr(run.config)
    assert not any(f in text for f in faults) and "healthy" not in text
    blob = pickle.dumps(run)
    for word in [*faults, *FORBIDDEN_TYPES, "severity", "healthy"]:
        assert word.encode() not in blob, word


def test_reachability_walk_would_catch_a_leak(
    digits_grid: dict[tuple[str, int], RunRecord],
) -> None:
    """The walk above is not vacuous: a run carrying its record is caught."""
    record = digits_grid[("dead_units", 0)]
    run = run_for(record, get_task("digits"))
    leaky = Run(run.task, run.seed, run.trace, run.config, run.probe)
    object.__setattr__(leaky, "extra", record)
    names = {type(o).__name__ for o in _reachable(leaky)}
    assert "RunSpec" in names and "dead_units" in _strings(_reachable(leaky))


def test_probe_rebuilds_the_run_model(digits_grid: dict[tuple[str, int], RunRecord]) -> None:
    run = run_for(digits_grid[("too_small_model", 0)], get_task("digits"))
    assert run.probe is not None
    model = run.probe.make_model()
    X, y = run.probe.train_data(16)
    assert X.shape == (16, 64) and y.shape == (16,)
    assert model(X).shape == (16, 10)
    assert run.config.layer_widths == (64, 2, 10)
    before = run.probe.steps_used
    run.probe.loss(model(X), y)
    assert run.probe.steps_used == before + 1
    # A fresh copy each time: training one does not touch the next.
    other = run.probe.make_model()
    assert other is not model
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), other.parameters()))
