"""Records survive a JSON round trip exactly, NaN and infinity included, as strict JSON."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from faultbench.storage.records import RunRecord, dumps, loads
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
