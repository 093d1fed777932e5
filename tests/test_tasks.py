"""Tasks: the shipped ones, their pinned data, and a user's own arrays."""

from __future__ import annotations

import hashlib
import re

import numpy as np
import pytest
import torch
from sklearn.datasets import load_iris

import faultbench as fb
from faultbench.datasets.synthetic import synthetic_arrays
from faultbench.faults.fault import canonical_conditions
from faultbench.faults.recipe import base_setup
from faultbench.tasks.task import TrainDefaults, task_names
from faultbench.training.loop import train
from faultbench.training.model import build_model

SYNTHETIC_SHA256 = "c005034b5472689c1c9ade8d748afa203cb2952b9e6896302918244bba4e5671"


def test_synthetic_arrays_never_drift() -> None:
    X, y = synthetic_arrays()
    digest = hashlib.sha256(np.round(X, 6).tobytes() + y.astype(np.int64).tobytes()).hexdigest()
    assert digest == SYNTHETIC_SHA256


def _class_tasks() -> list[str]:
    """The shipped tasks of one class per example (a sequence task's tokens and splits:
    tests/test_sequences.py; the other kinds: tests/test_kinds_tasks.py)."""
    return [n for n in task_names() if fb.get_task(n).kind.name == "multiclass"]


@pytest.mark.parametrize("name", _class_tasks())
def test_shipped_task_is_normalized_and_stratified(name: str) -> None:
    task = fb.get_task(name)
    assert np.isfinite(task.X_train).all() and np.isfinite(task.X_val).all()
    if task.defaults.architecture == "gru":  # token ids stay ids: not normalized
        assert set(np.unique(task.X_train)) <= set(range(task.n_classes))
    else:
        assert np.allclose(task.X_train.mean(axis=0), 0, atol=1e-4)
    assert set(np.unique(task.y_val)) == set(range(task.n_classes))
    train_share = np.bincount(task.y_train) / len(task.y_train)
    val_share = np.bincount(task.y_val) / len(task.y_val)
    assert np.abs(train_share - val_share).max() < 0.02


def test_tasks_differ_in_shape() -> None:
    digits, synthetic = fb.get_task("digits"), fb.get_task("synthetic")
    assert (digits.n_features, digits.n_classes) == (64, 10)
    assert synthetic.n_features != digits.n_features
    assert synthetic.n_classes != digits.n_classes


def test_string_labels_map_to_indices() -> None:
    iris = load_iris()
    names = iris.target_names[iris.target]
    task = fb.Task.from_arrays("iris", iris.data, names)
    assert task.classes == ("setosa", "versicolor", "virginica")
    assert task.y_train.dtype == np.int64 and set(task.y_train) == {0, 1, 2}
    decoded = [task.classes[i] for i in task.y_train[:5]]
    assert all(isinstance(label, str) for label in decoded)


def test_from_arrays_task_runs_through_evaluate() -> None:
    iris = load_iris()
    task = fb.Task.from_arrays(
        "iris", iris.data, iris.target_names[iris.target], defaults=TrainDefaults(steps=60)
    )
    report = fb.evaluate("always-healthy", task, seeds=1, grid="classic")
    assert (report.correct, report.total) == (1, 10)
    assert report.task == "iris" and report.tuned is False
    assert list(report.confusion.index) == [c.name for c in canonical_conditions(task=task)]
    assert report.results[0].train_steps == 60


def _optimizer_of(task: fb.Task) -> torch.optim.Optimizer:
    """The optimizer the task's healthy recipe builds."""
    recipe = base_setup(task, 0)
    model = build_model(recipe)
    return recipe.make_optimizer(recipe.param_groups(model, recipe), recipe)


def test_tasks_declare_their_optimizer_and_shapes_trains_with_sgd_and_momentum() -> None:
    shapes = _optimizer_of(fb.get_task("shapes"))
    assert type(shapes) is torch.optim.SGD
    assert shapes.defaults["lr"] == 0.05 and shapes.defaults["momentum"] == 0.9
    digits = _optimizer_of(fb.get_task("digits"))
    assert type(digits) is torch.optim.Adam and digits.defaults["lr"] == 1e-3


def test_a_user_task_chooses_its_optimizer() -> None:
    iris = load_iris()
    defaults = TrainDefaults(optimizer="sgd", lr=0.1, momentum=0.5, steps=40)
    task = fb.Task.from_arrays("iris", iris.data, iris.target, defaults=defaults)
    optimizer = _optimizer_of(task)
    assert type(optimizer) is torch.optim.SGD and optimizer.defaults["momentum"] == 0.5
    result = train(base_setup(task, 0))
    assert result.config is not None and result.config.optimizer == "SGD"
    assert result.config.lr == 0.1 and result.config.steps == 40


def test_an_unknown_optimizer_is_refused_with_the_nearest_name() -> None:
    with pytest.raises(
        fb.FaultbenchError,
        match=re.escape(
            "Unknown optimizer 'adamx'. Did you mean 'adam'? Valid: adam, adamw, rmsprop, sgd"
        ),
    ):
        TrainDefaults(optimizer="adamx")
