"""A stored every-step trace read as the Monitor would have recorded it: ``Trace.sampled``."""

from __future__ import annotations

from dataclasses import fields

import numpy as np
import pytest
import torch

from faultbench.faults.family import draw_design
from faultbench.faults.fault import condition
from faultbench.faults.recipe import base_setup
from faultbench.tasks.task import get_task
from faultbench.training.loop import train
from faultbench.training.monitor import DEFAULT_EVERY, SAMPLINGS
from faultbench.training.trace import Trace

TIMINGS = ("wait_seconds", "compute_seconds")  # wall-clock: differ between any two runs


def _assert_same(read: Trace, recorded: Trace) -> None:
    for f in fields(Trace):
        if f.name in TIMINGS:
            continue
        a, b = getattr(read, f.name), getattr(recorded, f.name)
        if isinstance(a, dict):
            assert a.keys() == b.keys(), f.name
            for key in a:
                np.testing.assert_array_equal(np.asarray(a[key]), np.asarray(b[key]), f.name)
        else:
            np.testing.assert_array_equal(a, b, f.name)


@pytest.fixture(autouse=True)
def _one_thread() -> object:
    before = torch.get_num_threads()
    torch.set_num_threads(1)  # bit-for-bit comparisons need the workers' one thread
    yield
    torch.set_num_threads(before)


@pytest.mark.parametrize(
    ("task", "fault"),
    [("digits", ""), ("digits", "missing_zero_grad"), ("shapes", "frozen_layer"), ("language", "")],
)
def test_an_every_step_trace_read_at_20_is_what_monitor_every_20_records(
    task: str, fault: str
) -> None:
    the_task = get_task(task)
    recipe = base_setup(the_task, 0, draw_design(the_task, 0))  # a base every fault takes
    if fault:
        recipe = condition(fault).apply(recipe)
    every_step, recorded = train(recipe, every=1).trace, train(recipe, every=DEFAULT_EVERY).trace
    assert every_step is not None and recorded is not None
    assert every_step.every == 1 and recorded.every == DEFAULT_EVERY
    read = every_step.sampled(DEFAULT_EVERY)
    _assert_same(read, recorded)
    assert list(read.stat_steps) == list(range(0, recipe.steps, DEFAULT_EVERY))
    assert read.samplings == (DEFAULT_EVERY,)  # a sampled trace cannot be read finer


def test_a_trace_lists_its_samplings_and_refuses_the_others() -> None:
    task = get_task("synthetic")
    trace = train(base_setup(task, 0)).trace
    assert trace is not None and trace.samplings == (1, *SAMPLINGS)
    assert trace.sampled(1) is trace
    sparse = trace.sampled(50)
    assert len(sparse.stat_steps) == 12 and len(sparse.loss) == len(trace.loss)
    for name in ("grad_norm", "update_ratio"):
        for layer, values in getattr(sparse, name).items():
            np.testing.assert_array_equal(values, getattr(trace, name)[layer][::50])
    with pytest.raises(ValueError, match=r"can be read at every=\[1, 5, 10, 20, 50\]; got every=7"):
        trace.sampled(7)
    assert Trace.from_dict(trace.to_dict()).sampled(20).no_grad_weights == (
        trace.sampled(20).no_grad_weights
    )
