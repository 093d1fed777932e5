"""A stored every-step trace read as the Monitor would have recorded it (``Trace.sampled``),
and cut as a run stopped early would have it (``Trace.prefix``)."""

from __future__ import annotations

import re
from dataclasses import fields, replace

import numpy as np
import pytest
import torch

from faultbench.faults.family import draw_design
from faultbench.faults.fault import condition
from faultbench.faults.recipe import base_setup
from faultbench.tasks.task import get_task
from faultbench.training.loop import train
from faultbench.training.monitor import DEFAULT_EVERY, SAMPLINGS
from faultbench.training.trace import PREFIXES, Trace, prefix_step, prefix_steps

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


#: What a run stopped early does differently from the same run cut: its own evaluations
#: (the loop spaces them over its steps) and its own marks.
EVALUATED = ("eval_steps", "train_acc", "val_acc", "val_loss", "val_token_acc", "metrics")


@pytest.fixture(scope="module")
def digits_full() -> tuple[object, Trace]:
    recipe = base_setup(get_task("digits"), 0)
    assert recipe.design.schedule == "constant"  # a shorter run is the same run, cut
    result = train(recipe)
    assert result.trace is not None
    return result, result.trace


@pytest.mark.parametrize("fraction", PREFIXES)
def test_a_prefix_is_the_run_stopped_at_that_step_bit_for_bit(
    digits_full: tuple[object, Trace], fraction: float
) -> None:
    full, trace = digits_full
    recipe = base_setup(get_task("digits"), 0)
    step = prefix_step(recipe.steps, fraction)
    stopped = train(replace(recipe, steps=step))
    assert stopped.trace is not None and stopped.config is not None
    cut = trace.prefix(fraction)
    assert cut.steps == step == stopped.trace.steps
    _assert_same(
        replace(cut, **{name: getattr(stopped.trace, name) for name in (*EVALUATED, "at_steps")}),
        stopped.trace,
    )  # every per-step and recorded-step series, and the summaries at that step
    assert cut.weight_change == stopped.trace.weight_change != trace.weight_change
    assert set(cut.eval_steps) <= set(trace.eval_steps) and cut.eval_steps.max() <= step
    assert len(cut.val_acc) == len(cut.eval_steps) == int((trace.eval_steps <= step).sum())
    assert full.config.until(cut) == stopped.config  # type: ignore[attr-defined]


def test_a_sampled_trace_cuts_as_the_sampled_run_stopped_there(
    digits_full: tuple[object, Trace],
) -> None:
    _, trace = digits_full
    recipe = base_setup(get_task("digits"), 0)
    step = prefix_step(recipe.steps, 0.25)
    stopped = train(replace(recipe, steps=step), every=DEFAULT_EVERY).trace
    assert stopped is not None
    cut = trace.sampled(DEFAULT_EVERY).prefix(0.25)
    _assert_same(
        replace(cut, **{n: getattr(stopped, n) for n in (*EVALUATED, "at_steps")}), stopped
    )


def test_a_stored_trace_cuts_the_same_and_refuses_unmarked_steps(
    digits_full: tuple[object, Trace],
) -> None:
    _, trace = digits_full
    assert (
        sorted(int(k) for k in trace.at_steps) == list(prefix_steps(trace.steps)) == [60, 150, 300]
    )
    _assert_same(Trace.from_dict(trace.to_dict()).prefix(0.5), trace.prefix(0.5))
    assert trace.prefix(1.0) is trace
    with pytest.raises(ValueError, match=re.escape("cut after steps [60, 150, 300] or 600")):
        trace.prefix(0.3)
    with pytest.raises(ValueError, match="in \\(0, 1\\]"):
        trace.prefix(0.0)
    assert prefix_steps(70) == (7, 17, 35) and prefix_step(3, 0.1) == 1
