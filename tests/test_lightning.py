"""The Lightning callback: a real ``Trainer.fit`` records a trace and prints the doctor's report."""

from __future__ import annotations

import math
import warnings

import lightning.pytorch as pl
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from faultbench.integrations.lightning import FaultbenchCallback
from faultbench.training.monitor import DEFAULT_EVERY

BATCH = 16
EXAMPLES = 96  # 6 batches an epoch


class Classifier(pl.LightningModule):
    """A tiny MLP that keeps its own record of each step, for the test to compare with."""

    def __init__(self, lr: float = 1e-2) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 3))
        self.lr = lr
        self.losses: list[float] = []  # per batch, as training_step computed it
        self.grad_norms: list[float] = []  # per optimizer step: the hidden layer's gradient
        self.hits: list[float] = []  # per batch: training accuracy

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], _: int) -> dict:
        x, y = batch
        out = self(x)
        loss = F.cross_entropy(out, y)
        self.losses.append(float(loss))
        self.hits.append(float((out.argmax(1) == y).double().mean()))
        return {"loss": loss, "output": out}

    def on_before_optimizer_step(self, optimizer: torch.optim.Optimizer) -> None:
        grads = [p.grad.double() for p in self.net[0].parameters()]
        self.grad_norms.append(math.sqrt(sum(float(g.norm()) ** 2 for g in grads)))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.parameters(), lr=self.lr)


def _loader() -> DataLoader:
    generator = torch.Generator().manual_seed(0)
    centres = torch.randn(3, 4, generator=generator) * 3
    y = torch.arange(EXAMPLES) % 3
    X = centres[y] + torch.randn(EXAMPLES, 4, generator=generator)
    return DataLoader(TensorDataset(X, y), batch_size=BATCH)


def _fit(callback: FaultbenchCallback, **trainer_args: object) -> tuple[Classifier, object]:
    torch.manual_seed(0)
    model = Classifier()
    trainer = pl.Trainer(
        max_epochs=4,
        accelerator="cpu",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[callback],
        **trainer_args,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Lightning's advice on workers and logging
        trainer.fit(model, _loader())
    return model, trainer


def test_fit_records_a_trace_and_prints_the_doctors_report(capsys: pytest.CaptureFixture) -> None:
    callback = FaultbenchCallback()
    model, trainer = _fit(callback)
    assert callback.monitor is not None
    t = callback.monitor.trace()
    assert t.steps == trainer.global_step == 4 * EXAMPLES // BATCH
    np.testing.assert_allclose(t.loss, model.losses, rtol=1e-6)
    recorded = t.stat_steps.astype(int)  # the Monitor's default: every 20th step
    assert recorded.tolist() == list(range(0, t.steps, DEFAULT_EVERY)) == [0, 20]
    np.testing.assert_allclose(
        t.grad_norm["net.0"], np.array(model.grad_norms)[recorded], rtol=1e-5
    )
    np.testing.assert_allclose(t.batch_acc, model.hits)
    assert list(t.grad_norm) == ["net.0", "net.2"] and set(t.nonpositive_share) == {"net.1"}
    config = callback.monitor.config()
    assert (config.optimizer, config.n_classes, config.layer_widths) == ("Adam", 3, (4, 16, 3))
    assert config.batch_size == BATCH
    assert (t.wait_seconds >= 0).all() and (t.compute_seconds > 0).all()
    printed = capsys.readouterr().out
    assert callback.report is not None
    assert str(callback.report) in printed and "diagnosis: " in printed
    assert "upgrade checklist" in printed


def test_accumulated_batches_make_one_step_per_optimizer_update() -> None:
    callback = FaultbenchCallback(show=False, every=4)
    model, trainer = _fit(callback, accumulate_grad_batches=2)
    t = callback.monitor.trace()  # type: ignore[union-attr]
    assert t.steps == trainer.global_step == 4 * EXAMPLES // BATCH // 2
    recorded = t.stat_steps.astype(int)  # every 4th optimizer update, as asked
    assert recorded.tolist() == [0, 4, 8]
    np.testing.assert_allclose(
        t.grad_norm["net.0"], np.array(model.grad_norms)[recorded], rtol=1e-5
    )
    assert callback.report is not None


def test_the_callback_leaves_no_hook_behind() -> None:
    callback = FaultbenchCallback(show=False)
    model, _ = _fit(callback)
    assert sum(len(m._forward_hooks) for m in model.modules()) == 0
