"""Records survive a JSON round trip exactly, NaN and infinity included, as strict JSON;
a run's key follows its code, not the text of its docstrings and comments."""

from __future__ import annotations

import importlib
import json
import math
import sys
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import faultbench.storage.records
import faultbench.training
from faultbench.faults.fault import FAULTS, Condition, Variant, condition, register
from faultbench.storage.records import RunRecord, RunSpec, code_version, dumps, loads
from faultbench.training.trace import Trace

floats = st.floats(allow_nan=True, allow_infinity=True)
scalars = st.none() | st.booleans() | st.integers() | floats | st.text(max_size=8)
keys = st.text(max_size=8) | st.sampled_from(["$float", "$dict", "$x"])
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(keys, inner, max_size=4),
    max_leaves=20,
)


def _strict(text: str) -> object:
    def refuse(name: str) -> object:
        raise AssertionError(f"bare {name} in the JSON")

    return json.loads(text, parse_constant=refuse)


def _same(a: object, b: object) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return (math.isnan(a) and math.isnan(b)) or a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and a == b


@given(values)
def test_dumps_loads_round_trip_with_non_finite_floats(value):
    text = dumps(value)
    _strict(text)  # valid JSON for any reader
    assert _same(loads(text), value)


def test_user_data_cannot_pose_as_an_encoded_float():
    value = {"$float": "nan", "inner": [{"$float": "inf"}]}
    assert loads(dumps(value)) == value


@settings(max_examples=30, deadline=None)
@given(st.lists(floats, min_size=1, max_size=50))
def test_record_round_trip_keeps_non_finite_losses(digits_grid, losses):
    record = digits_grid[("healthy", 0)]
    trace = replace(record.trace, loss=np.array(losses))
    changed = replace(record, trace=trace, seconds=float("inf"))
    text = dumps(changed.to_dict())
    _strict(text)
    back = RunRecord.from_dict(loads(text))
    np.testing.assert_array_equal(back.trace.loss, np.array(losses))  # NaN == NaN here
    assert back.seconds == math.inf and back.spec == record.spec and back.key == record.key
    for name in ("grad_norm", "update_ratio"):
        for layer, arr in getattr(record.trace, name).items():
            np.testing.assert_array_equal(getattr(back.trace, name)[layer], arr)
    assert isinstance(back.trace, Trace) and back.config == record.config


# -- the key hashes code, not text ----------------------------------------------------

#: A module that stands in for one of the training modules and holds a fault's transform.
THROWAWAY = """
\"\"\"A throwaway module{doc}.\"\"\"

LIMIT = {limit}  # the largest |input|{comment}


def transform(recipe, severity):
    \"\"\"Clip the training inputs{doc}.\"\"\"
    # clip, not a mask{comment}
    return recipe.replace(X_train=recipe.X_train.clip(-LIMIT, LIMIT){statement})
"""
PLAIN = {"doc": "", "comment": "", "limit": 3, "statement": ""}


@pytest.fixture
def run_keys(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., list[str]]]:
    """``run_keys(**edits)``: code_version(), a throwaway fault's code hash and the keys of a
    few runs, with THROWAWAY (edited) as the training code's ``hooks`` module and as
    the module of the fault ``fb_throwaway``. Nothing of the package is edited."""
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(sys, "dont_write_bytecode", True)  # no stale bytecode of an edit
    FAULTS.names()  # the shipped faults loaded, then kept apart from the throwaway one
    monkeypatch.setattr(FAULTS, "_entries", dict(FAULTS._entries))

    def keys(**edits: object) -> list[str]:
        (tmp_path / "fb_throwaway.py").write_text(THROWAWAY.format(**{**PLAIN, **edits}))
        sys.modules.pop("fb_throwaway", None)
        module = importlib.import_module("fb_throwaway")
        monkeypatch.setattr(faultbench.training, "hooks", module)  # what code_version reads
        FAULTS._entries.pop("fb_throwaway", None)
        register(
            "fb_throwaway", "clipped inputs", Variant("clip", "clipped", "data", module.transform)
        )
        code_version.cache_clear()
        faultbench.storage.records._faults_hash.cache_clear()
        conditions = [Condition(), condition("huge_inputs"), condition("fb_throwaway")]
        specs = [RunSpec("digits", "f", cond, seed) for cond in conditions for seed in (0, 1)]
        return [code_version(), FAULTS.get("fb_throwaway").source_hash, *(s.key() for s in specs)]

    yield keys
    sys.modules.pop("fb_throwaway", None)
    code_version.cache_clear()  # before the package's modules are put back: read them again
    faultbench.storage.records._faults_hash.cache_clear()


def test_docstring_and_comment_edits_keep_every_key(run_keys: Callable[..., list[str]]) -> None:
    base = run_keys()
    assert run_keys(doc=", reworded") == base
    assert run_keys(comment=", edited") == base


@pytest.mark.parametrize(
    "edit", [{"limit": 44}, {"statement": " * 2"}], ids=["constant", "statement"]
)
def test_a_changed_constant_or_statement_changes_the_code_and_every_key(
    run_keys: Callable[..., list[str]], edit: dict[str, object]
) -> None:
    base, edited = run_keys(), run_keys(**edit)
    assert edited[0] != base[0] and edited[1] != base[1]  # code_version, the fault's code hash
    assert all(a != b for a, b in zip(base[2:], edited[2:], strict=True))  # every run's key
