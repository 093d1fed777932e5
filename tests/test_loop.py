"""The benchmark's loop: evaluations scored after training equal evaluations made in place."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from faultbench import Monitor
from faultbench.faults.fault import base_setup, condition
from faultbench.tasks.task import get_task
from faultbench.training.loop import EVALUATIONS, _Scorer, train
from faultbench.training.model import BatchStream, build_model
from faultbench.training.trace import Trace


def _evaluated_in_place(task: str, fault: str) -> Trace:
    """The loop of ``train``, written out, with each evaluation made at its step."""
    setup = base_setup(get_task(task), 0)
    if fault:
        setup = condition(fault).apply(setup)
    model = build_model(setup)
    params = [p for n, p in model.named_parameters() if n.split(".")[0] not in setup.frozen_layers]
    optimizer = torch.optim.Adam(params, lr=setup.lr)
    monitor = Monitor(model, optimizer)
    stream = BatchStream(setup.X_train, setup.y_train, batch_size=setup.batch_size, seed=setup.seed)
    scorer, every = _Scorer(setup), max(1, setup.steps // EVALUATIONS)
    for step, (xb, yb) in zip(range(1, setup.steps + 1), monitor.batches(stream)):
        loss = F.cross_entropy(model(xb), yb)
        if setup.zero_grad:
            model.zero_grad()
        loss.backward()
        optimizer.step()
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


@pytest.mark.parametrize(
    ("task", "fault"), [("digits", ""), ("digits", "dead_units"), ("shapes", ""), ("language", "")]
)
def test_evaluations_scored_after_training_equal_those_made_in_place(task: str, fault: str) -> None:
    setup = base_setup(get_task(task), 0)
    if fault:
        setup = condition(fault).apply(setup)
    after = train(setup).trace
    assert after is not None
    in_place = _evaluated_in_place(task, fault)
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
