"""Every real-bug case reproduces: the faulty form shows the reported symptom, the
fixed twin does not and is a healthy run (faultbench.realbugs.cases).

Each form of each case trains once per test session (seconds each, one thread), and
every test of that form reads the same run.
"""

from __future__ import annotations

import inspect
import math
from functools import cache

import numpy as np
import pytest
import torch

from faultbench.realbugs import Case, CaseRun, case_names, get_case
from faultbench.realbugs.case import SIGNALS

#: Two bugs warn as they happen (the broadcast MSE, the zero-width layer): expected here.
pytestmark = [
    pytest.mark.filterwarnings("ignore:Using a target size:UserWarning"),
    pytest.mark.filterwarnings("ignore:Initializing zero-element tensors:UserWarning"),
]
NAMES = case_names()
#: Cases cheap enough (well under a second a form) to train twice for determinism.
CHEAP = (
    "aihwkit_simple_layer_zero_grad",
    "forum_xor_without_activation",
    "pytorch_mse_broadcast_shapes",
    "keras_linear_regression_nan_lr",
)
#: A healthy fixed twin's loss falls: its last tenth's mean is below this share of its
#: first tenth's (the slowest twin, a regression that fits within its first epoch, ends at 0.90).
FALLS_TO = 0.95
WAIT_LIMIT = 0.5  # a healthy twin spends under half its step time waiting for data


def train(name: str, fixed: bool) -> CaseRun:
    """One form of one case, trained on one thread (as the suite's runs are)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return get_case(name).run(fixed=fixed)
    finally:
        torch.set_num_threads(threads)


trained = cache(train)  # each form trains once per session; every test of it reads that run


@pytest.mark.parametrize("name", NAMES)
def test_faulty_form_shows_the_reported_symptom(name: str) -> None:
    case = get_case(name)
    run = trained(name, False)
    value = case.symptom.value(run.trace, run.config)
    assert case.symptom.shows(run.trace, run.config), f"{name}: {case.symptom} but got {value:.4g}"


@pytest.mark.parametrize("name", NAMES)
def test_fixed_twin_does_not_show_it(name: str) -> None:
    case = get_case(name)
    run = trained(name, True)
    value = case.symptom.value(run.trace, run.config)
    assert not math.isnan(value), f"{name}: the fixed twin's {case.symptom.signal} is undefined"
    assert not case.symptom.shows(run.trace, run.config), f"{name}: fixed twin has {value:.4g}"


@pytest.mark.parametrize("name", NAMES)
def test_fixed_twin_is_a_healthy_run(name: str) -> None:
    trace = trained(name, True).trace
    assert np.isfinite(trace.loss).all(), f"{name}: the fixed twin's loss is not finite"
    run = trained(name, True)
    fell = SIGNALS["loss_ratio"][1](trace, run.config, "")
    assert fell < FALLS_TO, f"{name}: the fixed twin's loss ends at {fell:.3f} of its start"
    assert trace.wait_share < WAIT_LIMIT, f"{name}: fixed twin waits {trace.wait_share:.2f}"
    for name_, values in (("val_acc", trace.val_acc), ("val_loss", trace.val_loss)):
        measured = values[~np.isnan(values)]  # a regression measures no accuracy
        assert np.isfinite(measured).all(), f"{name}: the fixed twin's {name_} is not finite"


@pytest.mark.parametrize("name", NAMES)
def test_forms_record_every_step_of_the_declared_optimizer(name: str) -> None:
    case = get_case(name)
    for fixed in (False, True):
        run = trained(name, fixed)
        steps = len(run.trace.loss)
        assert steps == run.trace.steps == run.config.steps > 0
        assert list(run.trace.stat_steps) == list(range(steps)), "the trace is every step"
        assert run.config.optimizer == case.optimizer, f"{name}: OPTIMIZER says {case.optimizer}"
        X, y = run.probe.train_data()
        assert len(X) == len(y) > 0


@pytest.mark.parametrize("name", NAMES)
def test_probe_rebuilds_the_untrained_model(name: str) -> None:
    """The probe's factory gives the model the script started from, and its loss runs."""
    probe = trained(name, True).probe
    first, second = probe.make_model(), probe.make_model()
    for a, b in zip(first.state_dict().values(), second.state_dict().values(), strict=True):
        assert torch.equal(a, b), f"{name}: make_model is not deterministic"
    X, y = probe.train_data(16)
    with torch.no_grad():
        loss = probe.loss(first(X), y)
    assert loss.dim() == 0 and torch.isfinite(loss)


@pytest.mark.parametrize("name", CHEAP)
def test_a_form_trains_to_the_same_trace_twice(name: str) -> None:
    for fixed in (False, True):
        again = train(name, fixed).trace
        np.testing.assert_array_equal(again.loss, trained(name, fixed).trace.loss)


@pytest.mark.parametrize("name", NAMES)
def test_forms_share_every_line_but_the_bug(name: str) -> None:
    """The script branches on ``fixed`` (one function, two forms), and the symptom's signal
    is one the test can read."""
    case: Case = get_case(name)
    source = inspect.getsource(case.script)
    assert "fixed" in source.split(")", 1)[1], f"{name}: script never reads `fixed`"
    assert case.symptom.signal in SIGNALS
