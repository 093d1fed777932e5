"""Tabular tasks of every kind a fully connected network is trained for, from scikit-learn's
bundled or generated data (nothing is downloaded):

- ``diabetes`` (regression, the tuned-on one): scikit-learn's bundled diabetes data, a
  disease-progression score from 10 measurements of 442 patients. As much as a linear model
  gets is a validation R² of about 0.33 on this split; the network gets as much, no more.
- ``friedman`` (regression, held out): Friedman's first problem (``make_friedman1``), a
  nonlinear function of 5 of 10 uniform features plus noise; a linear model gets R² 0.75.
- ``cancer`` (binary): scikit-learn's bundled breast cancer data, malignant or benign from
  30 measurements; one logit, ``BCEWithLogitsLoss``.
- ``tags`` (multi-label): generated documents (``make_multilabel_classification``), 20
  word counts, each tagged with a set of 6 labels; one logit per label.

Each task's family draws what a practitioner would write for data this small: few, narrow
layers (a wide deep network only overfits 353 diabetes patients), dropout, weight decay.
"""

from __future__ import annotations

import numpy as np
from sklearn.datasets import (
    load_breast_cancer,
    load_diabetes,
    make_friedman1,
    make_multilabel_classification,
)

from faultbench.tasks.design import Family
from faultbench.tasks.task import TASKS, Task, TrainDefaults

FRIEDMAN_SEED = 20_261_204  # the generators' seeds; part of the tasks' identity
TAGS_SEED = 20_261_205
FRIEDMAN_ROWS = 2_000
FRIEDMAN_NOISE = 1.0  # standard deviation of the noise added to the target (its spread: ~5)
TAGS_ROWS = 2_000
TAGS_LABELS = 6
TAGS_FEATURES = 20
TAGS_PER_DOCUMENT = 2  # the average number of labels a document has


def _small_data() -> Family:
    """Designs for a few hundred rows: one or two narrow layers, a little dropout."""
    return Family(
        "mlp",
        depths=(1, 2),
        widths=(16, 32, 64),
        dropouts=(0.0, 0.1),
        batch_sizes=(16, 32),
    )


def _diabetes_family() -> Family:
    """What suits 353 patients and a score of R² 0.35, where a design that learns a little
    slower than the reference ends below the healthy bar. Measured on diabetes (3 seeds,
    each choice alone on the reference): Kaiming and Xavier initializations end at R² 0.19
    and 0.25, layer normalization at 0.29 and tanh at 0.31, against 0.34; at the optimizers'
    working rate, 3e-4 (measured), a cosine decay left 7 of 24 drawn designs below the bar,
    16-unit layers most of the rest. The family leaves them out: one or two layers of 32 or
    64 units at a constant rate (about one draw in five is still redrawn)."""
    return Family(
        "mlp",
        depths=(1, 2),
        widths=(32, 64),
        activations=("relu", "leaky_relu", "gelu", "silu"),
        norms=("none",),
        dropouts=(0.0, 0.1),
        batch_sizes=(16, 32),
        schedules=("constant",),
        inits=("default",),
    )


def _tabular(dropouts: tuple[float, ...] = (0.0, 0.1, 0.3)) -> Family:
    """Designs for a couple of thousand rows: up to three layers of up to 128 units."""
    return Family(
        "mlp",
        depths=(1, 2, 3),
        widths=(32, 64, 128),
        dropouts=dropouts,
        batch_sizes=(16, 32, 64),
    )


@TASKS.register("diabetes")
def build_diabetes() -> Task:
    """442 patients, 10 measurements -> disease progression a year later (regression, R²)."""
    data = load_diabetes()
    defaults = TrainDefaults(hidden=32, lr=1e-3, batch_size=16, steps=300)
    return Task.from_arrays(
        "diabetes",
        data.data,
        data.target,
        kind="regression",
        defaults=defaults,
        family=_diabetes_family(),
    )


def friedman_arrays() -> tuple[np.ndarray, np.ndarray]:
    """The raw (X, y) of ``friedman``: 10 uniform features, a target of the first 5."""
    X, y = make_friedman1(
        n_samples=FRIEDMAN_ROWS, n_features=10, noise=FRIEDMAN_NOISE, random_state=FRIEDMAN_SEED
    )
    return X, y


@TASKS.register("friedman")
def build_friedman() -> Task:
    """2,000 rows of Friedman's first problem: 10 features, 5 of them informative (R²)."""
    X, y = friedman_arrays()
    defaults = TrainDefaults(hidden=64, lr=3e-3, batch_size=32, steps=600)
    # A regression's output is read as a value, not a vote: heavy dropout (0.3) only adds
    # noise to it (R² 0.75 against the reference's 0.88 where it was drawn).
    family = _tabular(dropouts=(0.0, 0.1))
    return Task.from_arrays("friedman", X, y, kind="regression", defaults=defaults, family=family)


@TASKS.register("cancer")
def build_cancer() -> Task:
    """569 tumours, 30 measurements -> malignant or benign (binary: one logit, accuracy)."""
    data = load_breast_cancer()
    names = data.target_names[data.target]  # "malignant" sorts last: the positive class
    defaults = TrainDefaults(hidden=32, lr=1e-3, batch_size=32, steps=400)
    task = Task.from_arrays(
        "cancer", data.data, names, kind="binary", defaults=defaults, family=_small_data()
    )
    if task.classes != ("benign", "malignant"):
        raise RuntimeError(f"expected malignant as the positive class; got {task.classes}")
    return task


def tags_arrays() -> tuple[np.ndarray, np.ndarray]:
    """The raw (X, Y) of ``tags``: word counts, and a 0/1 matrix of the labels."""
    X, Y = make_multilabel_classification(
        n_samples=TAGS_ROWS,
        n_features=TAGS_FEATURES,
        n_classes=TAGS_LABELS,
        n_labels=TAGS_PER_DOCUMENT,
        random_state=TAGS_SEED,
    )
    return X, Y


@TASKS.register("tags")
def build_tags() -> Task:
    """2,000 generated documents of 20 word counts, each with a set of 6 tags (F1)."""
    X, Y = tags_arrays()
    defaults = TrainDefaults(hidden=64, lr=1e-3, batch_size=32, steps=400)
    return Task.from_arrays("tags", X, Y, kind="multilabel", defaults=defaults, family=_tabular())
