"""The Monitor on a user's own loop of every kind: what it records equals an independent
computation (scikit-learn's metrics, numpy), and a shape it cannot read records nothing and
says so once."""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from sklearn.metrics import accuracy_score, f1_score, r2_score
from torch import nn

from faultbench import FaultbenchError, Monitor, Probe
from faultbench.faults.fault import labels
from faultbench.scoring.budget import calibration
from faultbench.tasks.kinds import KINDS, direction
from faultbench.tools.doctor import doctor
from faultbench.training.monitor import MonitorWarning

STEPS = 12
BATCH = 32


@dataclass(frozen=True)
class Loop:
    """A user's loop of one kind: the data, the model, the loss and the step score as
    scikit-learn computes it from the same outputs and targets."""

    X: torch.Tensor
    y: torch.Tensor
    model: Callable[[], nn.Module]
    loss: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
    reference: Callable[[np.ndarray, np.ndarray], float]  # (output, target) -> score


def _loops() -> dict[str, Loop]:
    g = torch.Generator().manual_seed(0)
    X = torch.randn(BATCH * STEPS, 6, generator=g)
    w = torch.randn(6, 3, generator=g)
    signal = X @ w

    def mlp(out: int) -> Callable[[], nn.Module]:
        return lambda: nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, out))

    tokens = torch.randint(0, 7, (BATCH * STEPS, 5), generator=g)
    labels = torch.where(torch.rand(tokens.shape, generator=g) < 0.3, -100, tokens)
    return {
        "multiclass": Loop(
            X,
            signal.argmax(1),
            mlp(3),
            F.cross_entropy,
            lambda o, y: accuracy_score(y, o.argmax(1)),
        ),
        "binary": Loop(
            X,
            (signal[:, :1] > 0).float(),
            mlp(1),
            F.binary_cross_entropy_with_logits,
            lambda o, y: accuracy_score(y.ravel() > 0.5, o.ravel() > 0),
        ),
        "multilabel": Loop(
            X,
            (signal > 0).float(),
            mlp(3),
            F.binary_cross_entropy_with_logits,
            lambda o, y: f1_score(y > 0.5, o > 0, average="micro", zero_division=1.0),
        ),
        "regression": Loop(
            X,
            signal[:, :2] + 0.1 * torch.randn(len(X), 2, generator=g),
            mlp(2),
            F.mse_loss,
            lambda o, y: r2_score(y, o, multioutput="variance_weighted"),
        ),
        "reconstruction": Loop(
            X,
            X,
            lambda: nn.Sequential(nn.Linear(6, 3), nn.ReLU(), nn.Linear(3, 6)),
            F.mse_loss,
            lambda o, y: r2_score(y, o, multioutput="variance_weighted"),
        ),
        "next_token": Loop(
            tokens,
            labels,
            lambda: nn.Sequential(nn.Embedding(7, 8), nn.Linear(8, 7)),
            lambda o, y: F.cross_entropy(o.reshape(-1, 7), y.reshape(-1)),
            lambda o, y: accuracy_score(y[y != -100], o.argmax(-1)[y != -100]),
        ),
    }


LOOPS = _loops()


def _train(loop: Loop, kind: str | None) -> tuple[Monitor, list[float]]:
    """The user's loop under a Monitor; the scikit-learn score of each step's batch."""
    torch.manual_seed(0)
    model = loop.model()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    monitor = Monitor(model, optimizer, every=1, kind=kind)
    expected = []
    batches = zip(loop.X.split(BATCH), loop.y.split(BATCH), strict=True)
    for xb, yb in monitor.batches(batches):
        out = model(xb)
        loss = loop.loss(out, yb)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        monitor.step(loss, out, yb)
        expected.append(loop.reference(out.detach().numpy(), yb.numpy()))
    return monitor, expected


def test_every_kind_has_a_loop_here() -> None:
    assert set(LOOPS) == set(KINDS)


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_the_step_score_equals_scikit_learns(kind: str) -> None:
    monitor, expected = _train(LOOPS[kind], kind)
    trace, config = monitor.trace(), monitor.config()
    # scikit-learn sums float32 outputs in float32, the Monitor in float64
    np.testing.assert_allclose(trace.batch_acc, expected, rtol=1e-5, atol=1e-6)
    assert config.kind == kind and config.score == KINDS[kind].score
    assert monitor.notes == []


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_chance_and_loss_reference_follow_the_targets(kind: str) -> None:
    loop = LOOPS[kind]
    monitor, _ = _train(loop, kind)
    config = monitor.config()
    y = loop.y.numpy()
    if kind in ("multiclass", "binary"):
        values = y.ravel().astype(np.int64)
        assert config.chance == pytest.approx(np.bincount(values).max() / len(values))
    elif kind == "multilabel":
        p = y.mean()
        assert config.chance == pytest.approx(2 * p / (1 + p))
    else:
        assert config.chance == 0.0
    outputs = {"multiclass": 3, "next_token": 7}
    if kind in outputs:
        assert config.loss_reference == pytest.approx(math.log(outputs[kind]))
    elif kind in ("binary", "multilabel"):
        assert config.loss_reference == pytest.approx(math.log(2))
    else:  # a squared error starts near the targets' variance (per column, averaged)
        assert config.loss_reference == pytest.approx(y.var(axis=0).mean(), rel=1e-5)


@pytest.mark.parametrize("kind", sorted(set(KINDS) - {"next_token"}))
def test_without_a_kind_the_steps_say_it_and_score_as_declared(kind: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error", MonitorWarning)  # nothing to warn of
        inferred, expected = _train(LOOPS[kind], None)
    declared, _ = _train(LOOPS[kind], kind)
    reading = inferred.kind_reading
    assert reading.kind == KINDS[kind] and not reading.declared
    np.testing.assert_array_equal(inferred.trace().batch_acc, declared.trace().batch_acc)
    np.testing.assert_allclose(inferred.trace().batch_acc, expected, rtol=1e-5, atol=1e-6)
    assert inferred.config() == declared.config()


def test_a_single_logit_binary_run_is_not_read_as_one_class() -> None:
    """The bug an earlier issue reported: (N, 1) logits and float (N, 1) targets were read as
    one class, a training accuracy of 1.0 whatever the model did; they are one logit against
    0/1 targets, a binary task's."""
    loop = LOOPS["binary"]
    monitor, expected = _train(loop, None)
    assert monitor.config().kind == "binary"
    assert monitor.trace().batch_acc.tolist() == pytest.approx(expected)
    assert min(expected) < 1.0  # the truth is not 1.0


@pytest.mark.parametrize(
    ("kind", "output", "target"),
    [
        ("binary", torch.zeros(8, 1), torch.zeros(4, 1)),
        ("multilabel", torch.zeros(8, 3), torch.zeros(8, 2)),
        ("regression", torch.zeros(8, 2), torch.zeros(8, 3)),
        ("multiclass", torch.zeros(8, 3), torch.zeros(8, 2, dtype=torch.long)),
    ],
)
def test_a_shape_the_kind_cannot_read_records_nothing_and_says_why(
    kind: str, output: torch.Tensor, target: torch.Tensor
) -> None:
    model = nn.Linear(2, 2)
    monitor = Monitor(model, torch.optim.SGD(model.parameters(), lr=0.1), kind=kind)
    with pytest.warns(MonitorWarning, match=f"a {kind} output of shape"):
        monitor.step(0.5, output, target)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        monitor.step(0.5, output, target)  # said once
    assert np.isnan(monitor.trace().batch_acc).all()


def test_log_eval_takes_any_named_metric_and_the_kinds_score_is_the_task_score() -> None:
    model = nn.Linear(2, 1)
    monitor = Monitor(model, torch.optim.SGD(model.parameters(), lr=0.1), kind="regression")
    monitor.step(1.0)
    monitor.log_eval(train_r2=0.5, val_r2=0.4, val_mae=0.9, val_loss=1.2)
    monitor.step(0.5)
    monitor.log_eval(val_r2=0.7, val_bleu=3.0)
    trace = monitor.trace()
    assert trace.val_acc.tolist() == [0.4, 0.7]
    assert trace.train_acc[0] == 0.5 and math.isnan(trace.train_acc[1])
    assert trace.metrics["val_mae"][0] == 0.9 and math.isnan(trace.metrics["val_mae"][1])
    assert trace.val_loss[0] == 1.2
    assert direction("val_mae") == "lower" and direction("train_r2") == "higher"
    assert direction("val_bleu") == ""  # kept, but no check reads a metric it cannot orient
    with pytest.raises(FaultbenchError, match="expected a metric named <split>_<metric>"):
        monitor.log_eval(r2=0.1)


def test_legacy_accuracies_are_the_task_score() -> None:
    model = nn.Linear(2, 3)
    monitor = Monitor(model, torch.optim.SGD(model.parameters(), lr=0.1))
    monitor.step(1.0)
    monitor.log_eval(train_acc=0.9, val_acc=0.8)
    trace = monitor.trace()
    assert trace.train_acc.tolist() == [0.9] and trace.val_acc.tolist() == [0.8]
    assert trace.metrics == {"train_accuracy": [0.9], "val_accuracy": [0.8]}


# -- the probe for any model -----------------------------------------------------------


class TwoInputs(nn.Module):
    """A user's model of two inputs: categorical codes and numeric features."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(5, 4)
        self.body = nn.Sequential(nn.Linear(4 + 3, 16), nn.ReLU(), nn.Linear(16, 1))

    def forward(self, codes: torch.Tensor, numbers: torch.Tensor) -> torch.Tensor:
        return self.body(torch.cat([self.embed(codes), numbers], dim=1))


def _two_input_run() -> tuple[Monitor, Probe]:
    g = torch.Generator().manual_seed(1)
    codes = torch.randint(0, 5, (256,), generator=g)
    numbers = torch.randn(256, 3, generator=g)
    y = (numbers[:, :1] * 2 + codes[:, None].float() / 5) + 0.1 * torch.randn(256, 1, generator=g)
    torch.manual_seed(0)
    model = TwoInputs()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    monitor = Monitor(model, optimizer, every=5, kind="regression")
    for epoch in range(8):
        for i in range(0, 256, 32):
            out = model(codes[i : i + 32], numbers[i : i + 32])
            loss = F.mse_loss(out, y[i : i + 32])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            monitor.step(loss, out, y[i : i + 32])
        with torch.no_grad():
            r2 = r2_score(y.numpy(), model(codes, numbers).numpy())
        monitor.log_eval(train_r2=r2, val_r2=r2, step=monitor.config().steps)
        del epoch

    def fresh() -> nn.Module:
        torch.manual_seed(0)
        return TwoInputs()

    return monitor, Probe.from_user(fresh, F.mse_loss, (codes[:64], numbers[:64]), y[:64])


def test_a_two_input_model_is_probed_and_the_doctor_answers() -> None:
    monitor, probe = _two_input_run()
    X, y = probe.train_data(16)
    assert isinstance(X, tuple) and len(X) == 2 and len(X[0]) == len(X[1]) == len(y) == 16
    report = doctor(monitor, "rules", probe=probe)
    assert report.headline in labels(), str(report)  # an answer, not a crash or "undecided"
    checks = {c.name: c.verdict for c in report.checks}
    assert checks["memorizes a small batch"] == "pass"  # through model(codes, numbers)
    # R² against a chance of 0, not 1.0; silent where no tuned-on task is a regression's
    calibrated = calibration("val_at_chance", "regression") is not None
    assert checks["validation improves"] == (
        "pass" if calibrated else "not measured: not calibrated"
    )
    assert probe.steps_used > 0


def test_a_multi_output_model_is_probed_and_the_doctor_answers() -> None:
    loop = LOOPS["regression"]
    monitor, _ = _train(loop, "regression")
    monitor.log_eval(train_r2=0.9, val_r2=0.85)
    probe = Probe.from_user(loop.model, F.mse_loss, loop.X[:64], loop.y[:64])
    report = doctor(monitor, "rules", probe=probe)
    assert report.headline in labels(), str(report)
    assert {c.name: c.verdict for c in report.checks}["memorizes a small batch"] == "pass"


def test_a_tuple_whose_inputs_differ_in_length_is_refused_naming_the_input() -> None:
    with pytest.raises(FaultbenchError, match=r"X\[1\] has 3 examples but y has 4"):
        Probe.from_user(
            TwoInputs,
            F.mse_loss,
            (torch.zeros(4, dtype=torch.long), torch.zeros(3, 3)),
            torch.zeros(4, 1),
        )
