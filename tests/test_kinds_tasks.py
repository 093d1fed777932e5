"""The shipped tasks of every kind: each builds with its declared kind, its data is what
the kind says, and its reference recipe trains healthy, as well as a scikit-learn model."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from sklearn.decomposition import PCA
from sklearn.linear_model import LinearRegression, LogisticRegression, Ridge
from sklearn.metrics import accuracy_score, f1_score, r2_score
from sklearn.multiclass import OneVsRestClassifier
from sklearn.preprocessing import OneHotEncoder

from faultbench.faults.fault import Condition
from faultbench.scoring.evaluate import run_for
from faultbench.storage.bases import healthy_verdict
from faultbench.storage.records import RunSpec
from faultbench.storage.runner import ensure_records
from faultbench.storage.store import Store
from faultbench.tasks.task import Task, get_task, task_names
from faultbench.tools.doctor import doctor

#: Every shipped task: (kind, inputs the model takes, outputs per example). A new task
#: states its own here.
SHIPPED = {
    "digits": ("multiclass", 1, 10),
    "synthetic": ("multiclass", 1, 6),
    "shapes": ("multiclass", 1, 5),
    "language": ("multiclass", 1, 23),
    "numbers": ("next_token", 1, 46),
    "spelling": ("next_token", 1, 44),
    "diabetes": ("regression", 1, 1),
    "friedman": ("regression", 1, 1),
    "cancer": ("binary", 1, 1),
    "tags": ("multilabel", 1, 6),
    "forecast": ("regression", 1, 8),
    "autoencoder": ("reconstruction", 1, 64),
    "ratings": ("regression", 2, 1),
    "churn": ("binary", 2, 1),
}
BEYOND_CLASSES = [
    n for n, (kind, _, _) in SHIPPED.items() if kind not in ("multiclass", "next_token")
]


def test_every_shipped_task_is_listed_with_its_kind() -> None:
    assert sorted(task_names()) == sorted(SHIPPED)


@pytest.mark.parametrize("name", list(SHIPPED))
def test_a_shipped_task_builds_with_its_kind_inputs_and_outputs(name: str) -> None:
    task = get_task(name)
    assert (task.kind.name, task.inputs, task.n_outputs) == SHIPPED[name]
    assert task.y_train.dtype == (np.float32 if task.kind.float_targets else np.int64)
    if task.inputs == 2:
        assert task.defaults.architecture == "tabular"
        assert task.codes_train is not None and task.codes_val is not None
        assert (task.codes_train >= 0).all() and (task.codes_val >= 0).all()
        assert tuple(np.maximum(task.codes_train.max(0), task.codes_val.max(0)) + 1) == (
            task.code_sizes
        )


@pytest.mark.parametrize("name", BEYOND_CLASSES)
def test_the_targets_are_what_the_kind_says(name: str) -> None:
    task = get_task(name)
    y, y_val = task.y_train, task.y_val
    assert y.ndim == 2 and y.shape[1] == task.n_outputs and np.isfinite(y).all()
    if task.kind.name == "regression":  # standardized with the training statistics
        assert np.allclose(y.mean(axis=0), 0, atol=1e-4) and np.allclose(
            y.std(axis=0), 1, atol=1e-3
        )
    if task.kind.name in ("binary", "multilabel"):  # 0/1, each label on both sides
        assert set(np.unique(y)) == {0.0, 1.0}
        assert (y.sum(axis=0) > 0).all() and (y_val.sum(axis=0) > 0).all()
    if task.kind.name == "binary":  # stratified
        assert abs(float(y.mean()) - float(y_val.mean())) < 0.02
    if task.kind.name == "reconstruction":  # the inputs it sees are what it rebuilds
        assert np.array_equal(y, task.X_train) and np.array_equal(y_val, task.X_val)


def _inputs(task: Task) -> tuple[np.ndarray, np.ndarray]:
    """The task's inputs for a scikit-learn model: codes one-hot encoded beside X."""
    if task.codes_train is None or task.codes_val is None:
        return task.X_train, task.X_val
    onehot = OneHotEncoder(handle_unknown="ignore").fit(task.codes_train)
    return (
        np.hstack([onehot.transform(task.codes_train).toarray(), task.X_train]),
        np.hstack([onehot.transform(task.codes_val).toarray(), task.X_val]),
    )


def baseline_score(task: Task) -> float:
    """The kind's score of a linear scikit-learn model on the task's own split: linear or
    ridge (one-hot codes) regression, logistic regression (one per label), PCA of the
    reference's narrowest width for a reconstruction."""
    X, X_val = _inputs(task)
    y, y_val = task.y_train, task.y_val
    kind = task.kind.name
    if kind == "regression":
        linear = Ridge() if task.codes_train is not None else LinearRegression()
        out = linear.fit(X, y).predict(X_val)
        return float(r2_score(y_val, out, multioutput="variance_weighted"))
    if kind == "binary":
        logistic = LogisticRegression(max_iter=5000).fit(X, y.ravel())
        return float(accuracy_score(y_val.ravel(), logistic.predict(X_val)))
    if kind == "multilabel":
        per_label = OneVsRestClassifier(LogisticRegression(max_iter=5000)).fit(X, y)
        return float(f1_score(y_val, per_label.predict(X_val), average="micro"))
    assert kind == "reconstruction", kind
    pca = PCA(min(task.reference_design().network.widths)).fit(X)
    out = pca.inverse_transform(pca.transform(X_val))
    return float(r2_score(y_val, out, multioutput="variance_weighted"))


@pytest.mark.parametrize("name", BEYOND_CLASSES)
def test_the_reference_recipe_trains_healthy_as_well_as_a_linear_model(
    name: str, tmp_path: Path
) -> None:
    # healthy_verdict's bar: a finite loss that falls below 0.8 of its start, and a final
    # score of at least 0.9 of the reference's, here a scikit-learn linear model's.
    task = get_task(name)
    spec = RunSpec(task.name, task.fingerprint, Condition(), 0)
    ((_, record, _),) = ensure_records([spec], task, store=Store(tmp_path), progress=False)
    baseline = baseline_score(task)
    assert baseline > task.kind.chance(task.y_val) + 0.1  # a reference that learned something
    assert healthy_verdict(record, baseline) == ""
    assert record.config is not None and record.config.kind == task.kind.name


#: A task of every kind, and the multi-output, recommender and two-input models.
DOCTORED = ["digits", "numbers", "diabetes", "cancer", "tags", "forecast", "autoencoder"]
DOCTORED += ["ratings", "churn"]


def test_the_doctor_is_asked_of_every_kind() -> None:
    assert {SHIPPED[name][0] for name in DOCTORED} == {kind for kind, _, _ in SHIPPED.values()}


@pytest.mark.parametrize("name", DOCTORED)
def test_the_doctor_calls_a_healthy_reference_run_of_every_kind_healthy(
    name: str, shared_store_root: Path
) -> None:
    # The reference recipe's first seed, with the probe the benchmark gives every run: the
    # rules' answer, the memorization line and the validation line all say healthy.
    task = get_task(name)
    spec = RunSpec(task.name, task.fingerprint, Condition(), 0)
    store = Store(shared_store_root)
    ((_, record, _),) = ensure_records([spec], task, store=store, progress=False)
    report = doctor(run_for(record, task))
    assert report.headline == "healthy", f"{name}:\n{report}"


def test_list_shows_every_kind_with_its_tasks_families_and_measured_time_per_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from faultbench.cli.main import main
    from faultbench.tasks.kinds import KINDS

    diabetes = get_task("diabetes")
    store = Store(tmp_path)
    specs = [RunSpec("diabetes", diabetes.fingerprint, Condition(), seed) for seed in (0, 1)]
    seconds = [record.seconds for _, record, _ in ensure_records(specs, diabetes, store=store)]
    assert main(["list", "--store", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    section = out[out.index("tasks, by kind") : out.index("real-bug suite")]
    heads = [section.index(f"\n  {kind.name}: {kind.summary}") for kind in KINDS.values()]
    assert heads == sorted(heads)  # every kind, in KINDS' order
    for name, (kind, _, _) in SHIPPED.items():
        at = section.index(f"\n    {name} ")
        under = max(i for i, k in zip(heads, KINDS) if i < at)
        assert under == heads[list(KINDS).index(kind)], name  # listed under its kind
        end = re.search(r"\n {2,4}\S", section[at + 1 :])
        lines = section[at : at + 1 + end.start()] if end else section[at:]
        assert "reference recipe: " in lines and "family: " in lines and "loaders:" in lines
        if name == "diabetes":
            median = f"{float(np.median(seconds)):.2f} s"
            assert f"time per run: {median} (measured: the median of 2 stored" in lines
        else:
            assert "time per run: not measured yet" in lines
