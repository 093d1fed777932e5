"""The one training loop every condition runs through (nanoGPT-style: flat, flags)."""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from faultbench.faults import RunSetup
from faultbench.model import BatchStream, build_model
from faultbench.monitor import Monitor
from faultbench.trace import RunConfig, Trace

EVALUATIONS = 20  # evaluations per run, evenly spaced
TRAIN_EVAL_SAMPLE = 512  # training examples scored at each evaluation


@dataclass(frozen=True)
class TrainResult:
    """What one training run produced."""

    trace: Trace | None  # None when trained with ``record=False``
    config: RunConfig | None  # None when trained with ``record=False``
    seconds: float  # wall time of the loop, evaluations included


def train(setup: RunSetup, *, record: bool = True) -> TrainResult:
    """Train one run. ``record=False`` is the bare loop the benchmark compares against."""
    start = time.perf_counter()
    model = build_model(setup)
    trainable = [
        p
        for name, p in model.named_parameters()
        if name.split(".")[0] not in setup.frozen_layers
    ]
    optimizer = torch.optim.Adam(trainable, lr=setup.lr)
    stream = BatchStream(
        setup.X_train,
        setup.y_train,
        batch_size=setup.batch_size,
        seed=setup.seed,
        delay=setup.batch_delay,
    )
    monitor = Monitor(model, optimizer) if record else None
    batches = monitor.batches(stream) if monitor else iter(stream)
    eval_every = max(1, setup.steps // EVALUATIONS)
    for step in range(1, setup.steps + 1):
        xb, yb = next(batches)
        loss = F.cross_entropy(model(xb), yb)
        if setup.zero_grad:
            model.zero_grad()  # the model's, so frozen layers' gradients are cleared too
        loss.backward()
        optimizer.step()
        if monitor is not None:
            monitor.step(loss)
            if step % eval_every == 0 or step == setup.steps:
                monitor.log_eval(**_evaluate(model, setup))
    if monitor is None:
        return TrainResult(None, None, time.perf_counter() - start)
    monitor.close()
    return TrainResult(monitor.trace(), monitor.config(), time.perf_counter() - start)


@torch.no_grad()
def _evaluate(model: nn.Module, setup: RunSetup) -> dict[str, float]:
    model.eval()
    n = min(TRAIN_EVAL_SAMPLE, len(setup.y_train))
    train_logits = model(torch.from_numpy(setup.X_train[:n]))
    val_logits = model(torch.from_numpy(setup.X_val))
    y_val = torch.from_numpy(setup.y_val)
    model.train()
    return {
        "train_acc": _accuracy(train_logits, torch.from_numpy(setup.y_train[:n])),
        "val_acc": _accuracy(val_logits, y_val),
        "val_loss": float(F.cross_entropy(val_logits, y_val)),
    }


def _accuracy(logits: torch.Tensor, y: torch.Tensor) -> float:
    return float((logits.argmax(dim=1) == y).float().mean())
