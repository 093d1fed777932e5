"""A user task cannot pass for a shipped one: a borrowed name is refused with the fix,
so a diagnoser is never scored "tuned-on" on data it was not tuned on."""

from __future__ import annotations

import re

import numpy as np
import pytest

import faultbench as fb
from faultbench.core.errors import FaultbenchError
from faultbench.faults.fault import canonical_conditions
from faultbench.tasks.task import MIN_EXAMPLES_PER_CLASS, get_task, task_names


@pytest.mark.parametrize("name", task_names())
def test_a_user_task_with_a_shipped_name_is_refused_with_the_fix(name: str, tmp_path) -> None:
    shipped = get_task(name)
    rng = np.random.default_rng(0)
    y = np.repeat(np.arange(3), MIN_EXAMPLES_PER_CLASS)
    mine = fb.Task.from_arrays(name, rng.normal(size=(len(y), 4)), y)
    message = (
        f"task '{name}' has the name of a registered task but other data or defaults "
        f"(fingerprint {mine.fingerprint}, registered {shipped.fingerprint}); a diagnoser tuned "
        f"on '{name}' would be scored on it as tuned-on. Expected a name of its own, e.g. "
        f"Task.from_arrays('my-{name}', X, y)"
    )
    with pytest.raises(FaultbenchError, match=re.escape(message)):
        get_task(mine)
    with pytest.raises(FaultbenchError, match=re.escape(message)):  # before any training
        fb.evaluate("rules", mine, seeds=1, store=tmp_path / "s")
    assert not (tmp_path / "s").exists()


def test_the_shipped_task_itself_and_an_identical_rebuild_are_accepted() -> None:
    digits = get_task("digits")
    assert get_task(digits) is digits
    rebuilt = fb.Task(
        name="digits",
        X_train=digits.X_train.copy(),
        y_train=digits.y_train.copy(),
        X_val=digits.X_val.copy(),
        y_val=digits.y_val.copy(),
        classes=digits.classes,
        defaults=digits.defaults,
    )
    assert rebuilt is not digits and get_task(rebuilt) is rebuilt  # same fingerprint: same task


def test_a_renamed_copy_is_held_out_for_a_diagnoser_tuned_on_the_original(tmp_path) -> None:
    digits = get_task("digits")
    mine = fb.Task.from_arrays(
        "my-digits",
        np.concatenate([digits.X_train, digits.X_val]),
        np.concatenate([digits.y_train, digits.y_val]),
        defaults=digits.defaults,
    )
    report = fb.evaluate(
        "rules",
        mine,
        seeds=1,
        conditions=canonical_conditions(["healthy"]),
        store=tmp_path / "s",
        progress=False,
    )
    assert report.task == "my-digits" and report.tuned is False  # rules is tuned on digits


def test_a_task_too_small_to_validate_on_is_refused_with_the_numbers() -> None:
    y = [0] * MIN_EXAMPLES_PER_CLASS + [1] * (MIN_EXAMPLES_PER_CLASS - 1)
    X = np.arange(2 * len(y), dtype=float).reshape(len(y), 2)
    n = MIN_EXAMPLES_PER_CLASS
    with pytest.raises(
        FaultbenchError,
        match=re.escape(
            f"class 1 has {n - 1} examples (1 of 2 classes have fewer than {n}; "
            f"{2 * n - 1} examples in all); expected at least {n} per class, enough to train "
            "on and to validate on"
        ),
    ):
        fb.Task.from_arrays("tiny", X, y)
    y[-1] = 1
    fb.Task.from_arrays("just-enough", np.vstack([X, X[:1]]), [*y, 1])  # n of each: accepted
