"""The suite's runs in the record store (faultbench.realbugs.storage)."""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import pickle
import sys
from pathlib import Path

import numpy as np
import pytest

from faultbench.faults.fault import Condition, labels
from faultbench.realbugs import SUITE, Case, get_case
from faultbench.realbugs.storage import (
    CaseRuns,
    case_and_form,
    ensure,
    load_check,
    run_of,
    save_check,
    spec_of,
)
from faultbench.storage.records import RunSpec
from faultbench.storage.store import Store
from faultbench.tools.doctor import Check

CHEAP = ("aihwkit_simple_layer_zero_grad", "forum_xor_without_activation")  # ~0.05 s a form


@pytest.fixture
def store(tmp_path: Path) -> Store:
    return Store(tmp_path / "store")


def test_spec_names_the_case_and_form_and_reads_back() -> None:
    case = get_case(CHEAP[0])
    spec = spec_of(case, "fixed")
    assert (spec.task, spec.seed) == (SUITE, case.seed)
    assert spec.condition.faults == ((f"{CHEAP[0]}.fixed", None),)
    assert case_and_form(spec) == (case, "fixed")
    with pytest.raises(ValueError, match="expected one of"):
        spec_of(case, "broken")


def test_keys_differ_by_form_and_case_and_are_stable(store: Store, tmp_path: Path) -> None:
    a, b = get_case(CHEAP[0]), get_case(CHEAP[1])
    keys = {store.key(spec_of(c, form)) for c in (a, b) for form in ("faulty", "fixed")}
    assert len(keys) == 4
    again = Store(tmp_path / "other")
    assert again.key(spec_of(a, "faulty")) == store.key(spec_of(a, "faulty"))


def test_a_case_whose_code_changes_gets_a_new_key(store: Store) -> None:
    a, b = get_case(CHEAP[0]), get_case(CHEAP[1])
    moved = dataclasses.replace(a, script=b.script)  # the same case, other code
    assert spec_of(moved, "faulty").task_fingerprint != spec_of(a, "faulty").task_fingerprint
    assert store.key(spec_of(moved, "faulty")) != store.key(spec_of(a, "faulty"))


def _copy_of_case(folder: Path, name: str, source: str) -> Case:
    """The case of ``source``, imported as module ``name`` from ``folder``."""
    folder.mkdir()
    (folder / f"{name}.py").write_text(source)
    sys.path.insert(0, str(folder))
    try:
        return Case.from_module(importlib.import_module(name), labels())
    finally:
        sys.path.remove(str(folder))
        sys.modules.pop(name, None)


def test_a_docstring_or_comment_edit_in_a_case_keeps_its_key(tmp_path: Path) -> None:
    """The suite's key is the grid's key function over the case's code: its docstrings and
    comments are no part of it (a reworded case retrains nothing), its statements are."""
    source = inspect.getsource(importlib.import_module(get_case(CHEAP[0]).script.__module__))
    reworded = source.replace('"""', '"""Reworded. ', 1) + "\n# a comment added\n"
    changed = source.replace("SEED = ", "SEED = 1 + ", 1)
    assert reworded != source and changed != source
    keys = {
        which: spec_of(_copy_of_case(tmp_path / which, CHEAP[0], text), "faulty").key()
        for which, text in (("same", source), ("reworded", reworded), ("changed", changed))
    }
    assert keys["reworded"] == keys["same"] == spec_of(get_case(CHEAP[0]), "faulty").key()
    assert keys["changed"] != keys["same"]


def test_grid_and_suite_runs_share_one_key_function() -> None:
    spec = spec_of(get_case(CHEAP[0]), "faulty")
    assert spec.code and RunSpec.from_dict(spec.to_dict()) == spec
    grid = RunSpec("digits", "abc", Condition((("lr_too_high", None),)), 0)
    assert "code" not in grid.to_dict()  # a grid run's record and key are as they were


def test_ensure_trains_once_then_reads_the_same_trace(store: Store) -> None:
    chosen = [get_case(name) for name in CHEAP]
    first = list(ensure(chosen, store))
    assert [(i.case.name, i.form, i.trained) for i in first] == [
        (name, form, True) for name in CHEAP for form in ("faulty", "fixed")
    ]
    again = list(ensure(chosen, Store(store.root)))  # a fresh process's view
    assert not any(i.trained for i in again)
    for old, new in zip(first, again, strict=True):
        assert new.record.ok and new.record.key == old.record.key
        np.testing.assert_array_equal(new.record.trace.loss, old.record.trace.loss)
        assert new.record.config == old.record.config


def test_a_broken_script_is_a_failed_record_and_is_retried(store: Store) -> None:
    def boom(fixed: bool, **_: object) -> None:
        raise RuntimeError("no data")

    broken = dataclasses.replace(get_case(CHEAP[0]), script=boom)
    first = list(ensure([broken], store))
    assert [i.record.status for i in first] == ["failed", "failed"]
    assert first[0].record.error == "RuntimeError: no data"
    assert all(i.trained for i in ensure([broken], store))  # failed attempts are not used


def test_run_of_hands_the_stored_trace_and_the_script_probe(store: Store) -> None:
    item = next(iter(ensure([get_case(CHEAP[1])], store)))
    run = run_of(item.record)
    assert (run.task, run.seed) == (SUITE, item.case.seed)
    assert run.trace is item.record.trace and run.config == item.record.config
    X, y = run.probe.train_data()
    assert len(X) == len(y) > 0
    rebuilt = pickle.loads(pickle.dumps(CaseRuns()))(item.record)  # as the worker does
    np.testing.assert_array_equal(rebuilt.trace.loss, run.trace.loss)


def test_doctor_checks_are_kept_beside_the_record(store: Store) -> None:
    item = next(iter(ensure([get_case(CHEAP[0])], store)))
    assert load_check(store, item.record, "code1") is None
    check = Check("memorizes a small batch", "16/16", "100% of 16 in 300 steps", "ok")
    save_check(store, item.record, "code1", check)
    assert Check(**load_check(store, item.record, "code1")) == check
    assert load_check(store, item.record, "code2") is None  # another doctor's check
