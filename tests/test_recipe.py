"""The run recipe: faults wrap its parts, compose in order, key the cache by their code,
and reach the probe; a fault of one's own needs no edit of faultbench."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from faultbench.faults.fault import (
    FAULTS,
    Condition,
    Severity,
    Variant,
    base_setup,
    condition,
    register,
)
from faultbench.faults.recipe import Recipe
from faultbench.faults.source import code_hash
from faultbench.scoring.evaluate import run_for
from faultbench.storage.records import RunRecord, RunSpec
from faultbench.storage.runner import ensure_records
from faultbench.storage.store import Store
from faultbench.tasks.task import get_task
from faultbench.training.model import build_model

Grid = dict[tuple[str, int], RunRecord]


# -- a fault of our own, from this module -----------------------------------------


def _rate_divided(recipe: Recipe, severity: float | None) -> Recipe:
    inner, factor = recipe.make_optimizer, float(severity or 1.0)

    def slowed(groups: list[dict[str, Any]], r: Recipe) -> torch.optim.Optimizer:
        optimizer = inner(groups, r)
        for group in optimizer.param_groups:
            group["lr"] /= factor
        return optimizer

    return recipe.replace(make_optimizer=slowed)


@pytest.fixture
def own_fault(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """``lr_too_low`` registered for one test, gone after it."""
    monkeypatch.setattr(FAULTS, "_entries", dict(FAULTS._entries))
    register(
        "lr_too_low",
        "the learning rate is far below the working rate",
        Variant(
            "divided",
            "the optimizer's rate divided by a large factor after it was built",
            "optimizer",
            _rate_divided,
            Severity(1000.0, 10.0, 1e6, "factor dividing the working rate"),
        ),
    )
    yield "lr_too_low"


def test_a_fault_from_a_test_module_wraps_the_optimizer_and_trains(
    own_fault: str, tmp_path: Path, digits_grid: Grid
) -> None:
    task = get_task("digits")
    spec = RunSpec(task.name, task.fingerprint, condition(own_fault), 0)
    [(_, record, fresh)] = list(ensure_records([spec], task, store=Store(tmp_path)))
    assert fresh and record.ok and record.trace and record.config
    assert record.config.lr == pytest.approx(task.defaults.lr / 1000)
    healthy = digits_grid[("healthy", 0)].trace
    assert healthy is not None
    # A thousand times smaller steps: the weights barely move, the loss stays near ln C.
    moved, moved_healthy = record.trace.weight_change, healthy.weight_change
    assert all(moved[k] < moved_healthy[k] / 20 for k in moved)
    assert np.mean(record.trace.loss[-20:]) > 0.8 * np.log(task.n_classes)
    assert own_fault in FAULTS.names()


def test_own_fault_is_unregistered_after_its_test() -> None:
    assert "lr_too_low" not in FAULTS.names()


# -- composition ----------------------------------------------------------------------


def test_faults_compose_each_wrapping_what_the_last_left() -> None:
    recipe = condition("frozen_layer.zero_lr", "huge_weight_decay").apply(_digits())
    model = build_model(recipe)
    optimizer = recipe.make_optimizer(recipe.param_groups(model, recipe), recipe)
    hidden = {id(p) for p in model.get_submodule("hidden").parameters()}
    groups = optimizer.param_groups
    assert [g["lr"] for g in groups] == [recipe.lr, 0.0]
    assert [g["weight_decay"] for g in groups] == [1.0, 1.0]  # the decay reaches both groups
    assert {id(p) for p in groups[1]["params"]} == hidden
    # The other order: the decay wraps the split groups; the same optimizer comes out.
    swapped = condition("huge_weight_decay", "frozen_layer.zero_lr").apply(_digits())
    again = swapped.make_optimizer(swapped.param_groups(model, swapped), swapped)
    assert [(g["lr"], g["weight_decay"]) for g in again.param_groups] == [
        (g["lr"], g["weight_decay"]) for g in groups
    ]


def test_healthy_recipe_is_the_tasks_and_untouched_by_conditions() -> None:
    healthy = _digits()
    Condition().apply(healthy)
    faulty = condition("huge_inputs", "label_mismatch").apply(healthy)
    assert np.array_equal(healthy.X_train, get_task("digits").X_train)  # a copy was changed
    assert np.array_equal(faulty.X_train, get_task("digits").X_train * 1000)
    assert (faulty.y_train == (healthy.y_train + 1) % 10).all()


def _digits(seed: int = 0) -> Recipe:
    return base_setup(get_task("digits"), seed)


# -- the probe rebuilds the recipe ------------------------------------------------------


def _as_run_of(cond: Condition, digits_grid: Grid) -> Any:
    """The run a diagnoser would get for ``cond`` (the trace is healthy's: only the
    rebuilt probe matters here)."""
    healthy = digits_grid[("healthy", 0)]
    task = get_task("digits")
    spec = RunSpec(task.name, task.fingerprint, cond, 0)
    record = RunRecord(spec, "", "", "ok", 0.0, healthy.trace, healthy.config)
    return run_for(record, task)


def test_probe_rebuilds_the_model_the_loss_and_the_data(digits_grid: Grid) -> None:
    run = _as_run_of(condition("softmax_before_loss.nll_of_probs"), digits_grid)
    X, y = run.probe.train_data(64)
    out = run.probe.make_model()(X)
    assert torch.allclose(out.sum(dim=1), torch.ones(64))  # the softmax is in the model
    expected = -out[torch.arange(64), y].mean()  # nll_loss of probabilities, by hand
    assert torch.allclose(run.probe.loss(out, y), expected)
    assert run.probe.steps_used == 1

    raw = _as_run_of(condition("huge_inputs.unstandardized"), digits_grid)
    X_raw, _ = raw.probe.train_data()
    recipe = condition("huge_inputs.unstandardized").apply(_digits())
    assert np.array_equal(X_raw.numpy(), recipe.X_train)
    assert X_raw.abs().max() > 1000 and not np.array_equal(X_raw.numpy(), _digits().X_train)

    frozen = _as_run_of(condition("frozen_layer.requires_grad"), digits_grid)
    hidden = frozen.probe.make_model().get_submodule("hidden")
    assert not any(p.requires_grad for p in hidden.parameters())


def test_probe_of_a_classic_run_is_the_models_and_cross_entropy(digits_grid: Grid) -> None:
    run = _as_run_of(Condition(), digits_grid)
    X, y = run.probe.train_data(32)
    out = run.probe.make_model()(X)
    assert torch.equal(run.probe.loss(out, y), F.cross_entropy(out, y))


# -- the cache key follows a fault's code -------------------------------------------------

PLUGIN = """
\"\"\"A plug-in's fault{doc}.\"\"\"

import numpy as np

LIMIT = {limit}  # the largest |input|{comment}


def _clip(X):
    \"\"\"Clip the inputs{doc}.\"\"\"
    # np.clip, not a mask{comment}
    return np.clip(X, -LIMIT, LIMIT){statement}


def _unrelated():
    return {unrelated}


def transform(recipe, severity):
    return recipe.replace(X_train=_clip(recipe.X_train))
"""
PLAIN = {"limit": 3, "unrelated": 1, "doc": "", "comment": "", "statement": ""}


def _module_hash(tmp_path: Path, **edits: object) -> str:
    """The hash of ``transform`` in a module written from PLUGIN with ``edits`` to PLAIN."""
    (tmp_path / "fb_hash_plugin.py").write_text(PLUGIN.format(**{**PLAIN, **edits}))
    sys.modules.pop("fb_hash_plugin", None)
    sys.path.insert(0, str(tmp_path))
    dont_write = sys.dont_write_bytecode
    sys.dont_write_bytecode = True  # no cached bytecode of an earlier edit of the same size
    try:
        module = importlib.import_module("fb_hash_plugin")
    finally:
        sys.path.remove(str(tmp_path))
        sys.dont_write_bytecode = dont_write
    return code_hash([module.transform])


def test_code_hash_follows_helpers_and_constants_but_nothing_else(tmp_path: Path) -> None:
    base = _module_hash(tmp_path)
    assert _module_hash(tmp_path, unrelated=22) == base  # a function it never calls
    assert _module_hash(tmp_path, limit=44) != base  # a constant its helper reads
    assert _module_hash(tmp_path) == base
    sys.modules.pop("fb_hash_plugin", None)


def test_code_hash_ignores_docstrings_and_comments_but_not_statements(tmp_path: Path) -> None:
    base = _module_hash(tmp_path)
    assert _module_hash(tmp_path, doc=", edited") == base  # the module's and the helper's
    assert _module_hash(tmp_path, comment=", edited") == base  # beside a constant and in a body
    assert _module_hash(tmp_path, statement=" * 1") != base
    sys.modules.pop("fb_hash_plugin", None)


def test_each_fault_keys_only_its_own_runs() -> None:
    task = get_task("digits")

    def key(cond: Condition) -> str:
        return RunSpec(task.name, task.fingerprint, cond, 0).key()

    classic, variant = condition("frozen_layer"), condition("frozen_layer.requires_grad")
    assert key(classic) != key(variant)
    assert (
        condition("frozen_layer").source_hash() == condition("frozen_layer.zero_lr").source_hash()
    )
    assert condition("frozen_layer").source_hash() != condition("dead_units").source_hash()
    assert Condition().source_hash() == ""
