"""Early warnings on a real loop of every kind: ``Monitor.check()`` and the Lightning
callback warn about a fault before the run ends, and never about a healthy run at the
default budget (the committed faultbench/scoring/budget.csv)."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import lightning.pytorch as pl
import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from faultbench import Monitor, Probe
from faultbench.diagnosers._treatment import FIXES
from faultbench.integrations.lightning import FaultbenchCallback
from faultbench.tasks.kinds import KINDS
from faultbench.tools.early import EarlyWarning, StopTraining

STEPS = 160  # updates of each loop
BATCH = 32
CHECK = 40  # updates between checks
VOCAB, WIDTH = 9, 16


@dataclass(frozen=True)
class Loop:
    """A user's loop of one kind, and the fault it is given to be warned about."""

    X: torch.Tensor  # the inputs
    y: torch.Tensor  # the targets
    model: Callable[[], nn.Module]  # builds the model
    loss: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]  # the loss
    fault: str  # the fault the broken form has
    broken: Callable[[Loop], Loop]  # the loop with that fault


def huge_inputs(loop: Loop) -> Loop:
    """Inputs a thousand times off unit scale."""
    return replace(loop, X=loop.X * 1000)


def frozen_first_layer(loop: Loop) -> Loop:
    """The model's first layer frozen (``requires_grad=False``)."""

    def model() -> nn.Module:
        built = loop.model()
        for p in built[0].parameters():
            p.requires_grad_(False)
        return built

    return replace(loop, model=model)


def _loops() -> dict[str, Loop]:
    g = torch.Generator().manual_seed(0)
    n = BATCH * 16
    X = torch.randn(n, 6, generator=g)
    signal = X @ torch.randn(6, 3, generator=g)

    def mlp(out: int) -> Callable[[], nn.Module]:
        return lambda: nn.Sequential(nn.Linear(6, 32), nn.ReLU(), nn.Linear(32, out))

    tokens = torch.randint(0, VOCAB, (n, 6), generator=g)

    def lm() -> nn.Module:
        return nn.Sequential(nn.Embedding(VOCAB, WIDTH), nn.ReLU(), nn.Linear(WIDTH, VOCAB))

    ae = lambda: nn.Sequential(nn.Linear(6, 4), nn.ReLU(), nn.Linear(4, 6))  # noqa: E731
    bce = F.binary_cross_entropy_with_logits
    return {
        "multiclass": Loop(
            X, signal.argmax(1), mlp(3), F.cross_entropy, "huge_inputs", huge_inputs
        ),
        "binary": Loop(X, (signal[:, :1] > 0).float(), mlp(1), bce, "huge_inputs", huge_inputs),
        "multilabel": Loop(X, (signal > 0).float(), mlp(3), bce, "huge_inputs", huge_inputs),
        "regression": Loop(X, signal[:, :2], mlp(2), F.mse_loss, "huge_inputs", huge_inputs),
        "reconstruction": Loop(X, X, ae, F.mse_loss, "frozen_layer", frozen_first_layer),
        "next_token": Loop(
            tokens[:, :-1],
            tokens[:, 1:],
            lm,
            lambda o, y: F.cross_entropy(o.reshape(-1, VOCAB), y.reshape(-1)),
            "frozen_layer",
            frozen_first_layer,
        ),
    }


LOOPS = _loops()


@pytest.fixture(autouse=True)
def _one_thread() -> object:
    before = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny models: more threads only wait for each other
    yield
    torch.set_num_threads(before)


def _batches(loop: Loop) -> list[tuple[torch.Tensor, torch.Tensor]]:
    pairs = list(zip(loop.X.split(BATCH), loop.y.split(BATCH), strict=True))
    return [pairs[i % len(pairs)] for i in range(STEPS)]


def _checked(loop: Loop, kind: str, **check: Any) -> list[list[EarlyWarning]]:
    """The loop under a Monitor, checked every :data:`CHECK` updates: each check's warnings."""
    torch.manual_seed(0)
    model = loop.model()
    optimizer = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=1e-3)
    monitor = Monitor(model, optimizer, kind=kind)
    found = []
    for step, (xb, yb) in enumerate(monitor.batches(_batches(loop)), start=1):
        out = model(xb)
        loss = loop.loss(out, yb)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        monitor.step(loss, out, yb)
        if step % CHECK == 0:
            found.append(monitor.check(show=False, **check))
    return found


def test_every_kind_has_a_loop_here() -> None:
    assert set(LOOPS) == set(KINDS)


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_a_healthy_loop_is_never_warned_about(kind: str) -> None:
    checks = _checked(LOOPS[kind], kind)
    assert len(checks) == STEPS // CHECK
    assert checks == [[]] * len(checks)


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_a_fault_is_warned_about_before_the_run_ends(kind: str) -> None:
    loop = LOOPS[kind]
    checks = _checked(loop.broken(loop), kind)
    first = next(i for i, found in enumerate(checks) if found)
    assert first < len(checks) - 1  # before the last check, at the run's end
    (warning,) = checks[first]  # one warning: what the doctor's diagnosis would name
    assert warning.fault == loop.fault and warning.step == (first + 1) * CHECK
    assert warning.fix == FIXES[loop.fault] and "healthy runs" in warning.evidence
    assert str(warning).startswith(f"faultbench early warning at step {warning.step}: {loop.fault}")


@pytest.mark.parametrize("broken", [False, True])
def test_with_a_probe_a_warning_is_raised_once_its_fix_helps(broken: bool) -> None:
    loop = LOOPS["multiclass"]
    used = loop.broken(loop) if broken else loop
    probe = Probe.from_user(used.model, used.loss, used.X[:256], used.y[:256])
    checks = _checked(used, "multiclass", probe=probe)
    if not broken:
        assert checks == [[]] * len(checks)
        return
    warning = checks[0][0]
    assert warning.fault == "huge_inputs" and probe.steps_used > 0
    assert warning.treatment.startswith("with inputs standardized the untrained model's loss")
    assert warning.treatment.endswith("confirmed")


def test_a_warning_stops_the_run_only_when_asked(capsys: pytest.CaptureFixture[str]) -> None:
    loop = LOOPS["multiclass"]
    broken = loop.broken(loop)
    assert all(len(found) == 1 for found in _checked(broken, "multiclass"))  # never stopped
    with pytest.raises(StopTraining) as stopped:
        _checked(broken, "multiclass", stop=True)
    assert [w.fault for w in stopped.value.warnings] == ["huge_inputs"]
    torch.manual_seed(0)
    model = loop.model()
    monitor = Monitor(model, torch.optim.Adam(model.parameters()), kind="multiclass")
    xb, yb = broken.X[:BATCH], broken.y[:BATCH]
    for _ in range(3):
        out = model(xb)
        monitor.step(F.cross_entropy(out, yb), out, yb)
        monitor.check()
    printed = capsys.readouterr().err.splitlines()
    assert len(printed) == 1 and "huge_inputs" in printed[0]  # said once, checked thrice


class _Module(pl.LightningModule):
    def __init__(self, loop: Loop) -> None:
        super().__init__()
        self.loop = loop
        self.net = loop.model()

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], _: int) -> dict:
        x, y = batch
        out = self.net(x)
        return {"loss": self.loop.loss(out, y), "output": out}

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam([p for p in self.parameters() if p.requires_grad], lr=1e-3)


def _fit(loop: Loop, kind: str) -> FaultbenchCallback:
    torch.manual_seed(0)
    callback = FaultbenchCallback(show=False, kind=kind, check_every=CHECK, stop_on_warning=True)
    trainer = pl.Trainer(
        max_steps=STEPS,
        accelerator="cpu",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[callback],
    )
    data = DataLoader(TensorDataset(loop.X, loop.y), batch_size=BATCH)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Lightning's advice on workers and logging
        trainer.fit(_Module(loop), data)
    return callback


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_the_lightning_callback_warns_and_stops_a_faulty_fit_only(kind: str) -> None:
    loop = LOOPS[kind]
    healthy = _fit(loop, kind)
    assert healthy.monitor is not None and healthy.monitor.trace().steps == STEPS
    assert healthy.warnings == []
    faulty = _fit(loop.broken(loop), kind)
    assert [w.fault for w in faulty.warnings] == [loop.fault]
    assert faulty.monitor is not None and faulty.monitor.trace().steps < STEPS  # stopped early
