"""The benchmark's loop: evaluations scored after training equal those made in place; a
run is reproducible; the loop and the model builder know no fault."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

import faultbench.training as training
from faultbench import Monitor
from faultbench.core import kernels
from faultbench.faults.family import draw_design
from faultbench.faults.fault import FAULTS, HELD_OUT, base_setup, condition
from faultbench.faults.recipe import Recipe
from faultbench.tasks.task import get_task
from faultbench.training.loop import EVALUATIONS, train
from faultbench.training.model import build_model
from faultbench.training.trace import Trace


def _evaluated_in_place(task: str, fault: str, drawn: bool) -> Trace:
    """The loop of ``train``, written out, with each evaluation made at its step (on the
    loop's CPU kernels: no oneDNN or NNPACK convolutions)."""
    with kernels.backends():
        return _written_out(task, fault, drawn)


def _written_out(task: str, fault: str, drawn: bool) -> Trace:
    setup = _setup(task, fault, drawn)
    if fault:
        setup = condition(fault).apply(setup)
    torch.manual_seed(setup.seed)
    model = setup.make_model(setup)
    optimizer = setup.make_optimizer(setup.param_groups(model, setup), setup)
    schedule = setup.make_schedule(optimizer, setup)
    monitor = Monitor(model, optimizer)
    scorer, every = setup.make_scorer(setup), max(1, setup.steps // EVALUATIONS)
    for step, (xb, yb) in zip(range(1, setup.steps + 1), monitor.batches(setup.loader(setup))):
        loss = setup.loss(model(xb), yb)
        setup.clear(model, optimizer, step)
        loss.backward()
        setup.clip(model, optimizer, step)
        setup.update(model, optimizer, step)
        schedule.step()
        monitor.step(loss)
        if step % every == 0 or step == setup.steps:
            model.eval()
            monitor.log_eval(**scorer(model))
            model.train()
    monitor.close()
    return monitor.trace()


def _evaluations(t: Trace) -> np.ndarray:
    return np.column_stack([t.eval_steps, t.train_acc, t.val_acc, t.val_loss])


@pytest.fixture(autouse=True)
def _one_thread() -> object:
    before = torch.get_num_threads()
    torch.set_num_threads(1)  # as in a worker: bit-for-bit comparisons need it
    yield
    torch.set_num_threads(before)


def _setup(task: str, fault: str, drawn: bool) -> Recipe:
    the_task = get_task(task)
    return base_setup(the_task, 0, draw_design(the_task, 0) if drawn else None)


@pytest.mark.parametrize(
    ("task", "fault", "drawn"),
    [
        ("digits", "", False),
        ("digits", "dead_units", False),
        ("digits", "lr_too_high.warmup", False),  # a schedule that changes the rate as it goes
        ("digits", "", True),  # a drawn base: dropout, its schedule and init
        ("shapes", "", False),
        ("shapes", "", True),
        ("language", "", False),
    ],
)
def test_evaluations_scored_after_training_equal_those_made_in_place(
    task: str, fault: str, drawn: bool
) -> None:
    setup = _setup(task, fault, drawn)
    if fault:
        setup = condition(fault).apply(setup)
    after = train(setup).trace
    assert after is not None
    in_place = _evaluated_in_place(task, fault, drawn)
    np.testing.assert_array_equal(_evaluations(after), _evaluations(in_place))
    assert len(after.eval_steps) == EVALUATIONS
    assert after.eval_steps[-1] == setup.steps
    # The last snapshot scored is the final weights, so the model ends as
    # training left it (the trace reads the weight change after the scoring).
    assert after.weight_change == in_place.weight_change


def test_evaluations_are_logged_in_step_order() -> None:
    model = torch.nn.Sequential(torch.nn.Linear(2, 2))
    monitor = Monitor(model, torch.optim.SGD(model.parameters(), lr=0.1))
    monitor.log_eval(train_acc=0.5, val_acc=0.5, step=10)
    with pytest.raises(ValueError, match=r"step=3.*step 10"):
        monitor.log_eval(train_acc=0.5, val_acc=0.5, step=3)


# Names of the flags the loop and the model builder once read, one per fault.
FAULT_FLAGS = ("zero_grad", "softmax_head", "dead_fraction", "frozen_layers", "batch_delay")


@pytest.mark.parametrize("module", ["loop", "model"])
def test_loop_and_model_builder_name_no_fault(module: str) -> None:
    source = (Path(training.__file__).parent / f"{module}.py").read_text()
    assert [flag for flag in FAULT_FLAGS if flag in source] == []
    faults = [*FAULTS.names(), *HELD_OUT.names()]
    assert [name for name in faults if name in source] == []


def test_model_builder_seeds_the_init() -> None:
    setup = base_setup(get_task("digits"), 3)
    first, second = build_model(setup), build_model(setup)
    for a, b in zip(first.parameters(), second.parameters()):
        assert torch.equal(a, b)
    other = build_model(setup.replace(seed=4))
    assert not torch.equal(next(first.parameters()), next(other.parameters()))


def _numbers(trace: Trace) -> list[np.ndarray]:
    """Every recorded number that is not a wall-clock time."""
    out = [trace.loss, trace.zero_grad_share, trace.inactive_share, _evaluations(trace)]
    for per_layer in (trace.grad_norm, trace.update_ratio):
        out += [per_layer[k] for k in sorted(per_layer)]
    return [*out, np.array(sorted(trace.weight_change.items()), dtype=object)]


@pytest.mark.parametrize("fault", ["", "label_noise", "starved_loader.slow_dataset"])
def test_a_run_trains_to_the_same_numbers_whatever_the_callers_threads(fault: str) -> None:
    cond = condition(fault) if fault else condition()
    setup = cond.apply(base_setup(get_task("digits"), 1)).replace(steps=120)
    first = train(setup).trace
    torch.set_num_threads(2)  # train() picks its own thread count
    torch.manual_seed(12345)  # and draws nothing from the caller's generator state
    second = train(setup).trace
    assert first is not None and second is not None
    for a, b in zip(_numbers(first), _numbers(second), strict=True):
        np.testing.assert_array_equal(a, b)
    assert torch.get_num_threads() == 2  # the caller's setting is put back
    assert not torch.are_deterministic_algorithms_enabled()
