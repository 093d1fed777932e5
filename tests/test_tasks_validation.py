"""``Task.from_arrays`` refuses malformed data with a clear message, and turns any
valid data (string labels included) into a finite, consistent task."""

from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from faultbench.core.errors import FaultbenchError
from faultbench.tasks.task import MIN_EXAMPLES_PER_CLASS as MIN
from faultbench.tasks.task import Task

GOOD_X = np.arange(3 * 2 * MIN, dtype=float).reshape(2 * MIN, 3)
GOOD_Y = [0, 1] * MIN
N = len(GOOD_Y)

BAD = {
    "nan": (
        np.where(GOOD_X == 4, np.nan, GOOD_X),
        GOOD_Y,
        "X must be finite; found nan at row 1, column 1 (1 non-finite values in all)",
    ),
    "inf": (
        np.where(GOOD_X == 3 * N - 1, np.inf, GOOD_X),
        GOOD_Y,
        f"X must be finite; found inf at row {N - 1}, column 2",
    ),
    "mismatched lengths": (
        GOOD_X,
        GOOD_Y[:-1],
        f"X has {N} rows but y has {N - 1} labels; expected equal lengths",
    ),
    "single class": (GOOD_X, [3] * N, "y has 1 class; expected at least 2 classes"),
    "fewer examples than classes": (
        GOOD_X[:3],
        ["a", "b", "c"],
        f"class 'a' has 1 example (3 of 3 classes have fewer than {MIN}; 3 examples in all); "
        f"expected at least {MIN} per class, enough to train on and to validate on",
    ),
    "a class seen once": (
        np.vstack([GOOD_X, GOOD_X[:1]]),
        [*GOOD_Y, "c"],
        f"class 'c' has 1 example (1 of 3 classes have fewer than {MIN}; {N + 1} examples",
    ),
    "one short of the minimum": (
        GOOD_X[: 2 * MIN - 1],
        GOOD_Y[:-1],
        f"class 1 has {MIN - 1} examples (1 of 2 classes have fewer than {MIN}",
    ),
    "1-D X": (GOOD_X[:, 0], GOOD_Y, f"X must be 2-D (examples x features); got shape ({N},)"),
    "3-D X": (GOOD_X.reshape(N, 3, 1), GOOD_Y, "X must be 2-D (examples x features); got shape"),
    "no features": (np.empty((N, 0)), GOOD_Y, f"X has no features (shape ({N}, 0))"),
    "text X": ([["a", "b"]] * N, GOOD_Y, "X must be a 2-D array of numbers"),
    "2-D y of other length": (
        GOOD_X,
        np.array(GOOD_Y).reshape(MIN, 2),
        f"X has {N} rows but y has shape ({MIN}, 2); expected {N} rows of targets",
    ),
    "3-D y": (GOOD_X, np.zeros((N, 2, 2)), "y has shape (20, 2, 2); expected one label per row"),
    "float labels of few values": (
        GOOD_X,
        np.array(GOOD_Y, dtype=float),
        f"y holds 2 distinct float values over {N} rows: class labels or a regression target?",
    ),
    "missing label": (
        GOOD_X,
        [0, 1, 0, None, *GOOD_Y[4:]],
        "y has a missing label (None) at row 3",
    ),
    "nan label": (
        GOOD_X,
        [0.0, 1.0, np.nan, *GOOD_Y[3:]],
        "y has a missing label (nan) at row 2",
    ),
    "overflowing column": (
        np.column_stack([[1e300, -1e300] * MIN, GOOD_X[:, 1]]),
        GOOD_Y,
        "X column 0 is too large to normalize",
    ),
    "outlier beyond float32": (
        np.where(GOOD_X == 0, 1e300, GOOD_X),
        GOOD_Y,
        "X column 0 spans too wide a range to normalize in float32: 1e+300",
    ),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_arrays_raise_a_clear_error(case):
    X, y, message = BAD[case]
    with pytest.raises(FaultbenchError, match=re.escape(message)):
        Task.from_arrays("t", X, y)


def test_string_labels_map_to_class_indices():
    labels = ["cat", "dog", "bird"] * MIN
    X = np.random.default_rng(0).normal(size=(3 * MIN, 2))
    task = Task.from_arrays("pets", X, labels)
    assert task.classes == ("bird", "cat", "dog")  # the originals, sorted
    assert task.y_train.dtype == np.int64 and set(task.y_train) == {0, 1, 2}
    assert sorted(task.classes[i] for i in np.concatenate([task.y_train, task.y_val])) == sorted(
        labels
    )


label_sets = st.sampled_from([["a", "b"], ["x", "y", "z"], [0, 1, 2, 3], [-1.5, 2.5]])


@st.composite
def valid_inputs(draw):  # type: ignore[no-untyped-def]
    classes = draw(label_sets)
    per_class = draw(st.integers(MIN, MIN + 3))
    y = [c for c in classes for _ in range(per_class)]
    y = draw(st.permutations(y))
    n_features = draw(st.integers(1, 4))
    # Values on one scale (millesimal steps up to 1e3): a column whose training
    # spread is 1e-83 next to a validation value of 1 has z-scores past float32
    # and is refused with a clear error instead (see the bad-input cases).
    steps = st.integers(-(10**6), 10**6).map(lambda v: v / 1000)
    X = draw(hnp.arrays(np.float64, (len(y), n_features), elements=steps))
    return X, y, draw(st.floats(0.05, 0.95))


@settings(max_examples=80, deadline=None)
@given(valid_inputs())
def test_valid_inputs_give_a_finite_consistent_task(data):
    X, y, val_fraction = data
    kind = "multiclass" if isinstance(y[0], float) else None  # floats alone read as targets
    task = Task.from_arrays("t", X, y, val_fraction=val_fraction, kind=kind)
    assert task.X_train.dtype == np.float32 and task.X_val.dtype == np.float32
    assert np.isfinite(task.X_train).all() and np.isfinite(task.X_val).all()
    assert len(task.X_train) == len(task.y_train) and len(task.X_val) == len(task.y_val)
    assert len(task.y_train) + len(task.y_val) == len(y)
    assert task.X_train.shape[1] == task.X_val.shape[1] == X.shape[1]
    assert task.n_classes == len(set(y))
    assert set(task.y_train) == set(range(task.n_classes))  # every class is trained on
    assert set(task.y_val) <= set(range(task.n_classes))


anything = st.one_of(
    hnp.arrays(
        np.float64,
        hnp.array_shapes(min_dims=0, max_dims=3, max_side=5),
        elements=st.floats(allow_nan=True, allow_infinity=True),
    ),
    st.lists(
        st.lists(st.one_of(st.floats(), st.text(max_size=2), st.none()), max_size=3), max_size=6
    ),
    st.none(),
    st.text(max_size=3),
    st.integers(),
)
any_labels = st.one_of(
    st.lists(st.one_of(st.integers(0, 3), st.text(max_size=1), st.none(), st.floats()), max_size=8),
    hnp.arrays(np.int64, hnp.array_shapes(min_dims=0, max_dims=2, max_side=6)),
    st.none(),
)


@settings(max_examples=150, deadline=None)
@given(anything, any_labels)
@example(np.zeros((2, 1)), np.array([[0], [1]]))  # an int target matrix: a regression task
def test_any_input_gives_a_task_or_a_faultbench_error(X, y):
    try:
        task = Task.from_arrays("t", X, y)
    except FaultbenchError as exc:
        assert str(exc) and "\n" not in str(exc)  # one clear line
        return
    assert np.isfinite(task.X_train).all() and np.isfinite(task.X_val).all()
    assert len(task.X_train) == len(task.y_train) and len(task.X_val) == len(task.y_val)
    if task.kind.float_targets:  # a target matrix (regression, multi-label): finite targets
        assert np.isfinite(task.y_train).all() and np.isfinite(task.y_val).all()
    else:  # class labels: every class is trained on
        assert set(task.y_train) == set(range(task.n_classes))
