"""Hand-made runs for the ports' tests: a healthy trace and config, changed one field at a time.

Every builder returns plain faultbench objects (``Trace``, ``RunConfig``, ``Run``,
``Probe``) made from numpy arrays and a tiny model, so a test states the symptom it
plants in one line.
"""

from __future__ import annotations

import dataclasses
from collections import OrderedDict
from typing import Any

import numpy as np
import torch
from torch import nn

from faultbench.scoring.run import Probe, Run
from faultbench.training.trace import RunConfig, Trace

STEPS, EVALS, CLASSES, FEATURES, HIDDEN = 600, 10, 3, 4, 8
LAYERS = ("hidden", "output")
# Above AUTOTRAINER's 0.7 from the first epoch: its flags are sticky, and a first epoch
# below it leaves "not converging" raised for good.
TRAIN_ACC = np.array([0.72, 0.8, 0.85, 0.88, 0.9, 0.91, 0.92, 0.925, 0.93, 0.935])


def healthy_trace(**changes: Any) -> Trace:
    """A run that learns smoothly: no rule of any port fires on it."""
    ones = np.ones(STEPS)
    fields: dict[str, Any] = {
        "loss": np.linspace(1.1, 0.2, STEPS),
        "grad_norm": {k: 0.5 * ones for k in LAYERS},
        "update_ratio": {k: 1e-3 * ones for k in LAYERS},
        "zero_grad_share": 0.01 * ones,
        "inactive_share": 0.1 * ones,
        "wait_seconds": 1e-4 * ones,
        "compute_seconds": 5e-4 * ones,
        "eval_steps": np.arange(1, EVALS + 1) * (STEPS // EVALS),
        "train_acc": TRAIN_ACC,
        "val_acc": TRAIN_ACC - 0.02,
        "val_loss": np.linspace(1.0, 0.35, EVALS),
        "input_stats": {"mean": 0.0, "std": 0.5, "abs_max": 0.9},
        "no_grad_weights": dict.fromkeys(LAYERS, 0),
        "weight_change": dict.fromkeys(LAYERS, 0.5),
        "weight_count": {
            "hidden": FEATURES * HIDDEN + HIDDEN,
            "output": HIDDEN * CLASSES + CLASSES,
        },
    }
    fields.update(changes)
    return Trace(**fields)


def config(**changes: Any) -> RunConfig:
    """The observable configuration of the hand-made runs."""
    base = RunConfig(
        optimizer="Adam",
        lr=1e-3,
        batch_size=12,
        steps=STEPS,
        n_classes=CLASSES,
        layer_widths=(FEATURES, HIDDEN, CLASSES),
        param_count=FEATURES * HIDDEN + HIDDEN + HIDDEN * CLASSES + CLASSES,
    )
    return dataclasses.replace(base, **changes)


def tiny_model(
    *, he: bool = True, softmax: bool = False, dead_bias: float | None = None
) -> nn.Module:
    """A 4-8-3 ReLU MLP; He-initialized with zero biases unless ``he`` is False."""
    torch.manual_seed(0)
    layers: OrderedDict[str, nn.Module] = OrderedDict(
        hidden=nn.Linear(FEATURES, HIDDEN), relu=nn.ReLU(), output=nn.Linear(HIDDEN, CLASSES)
    )
    if softmax:
        layers["softmax"] = nn.Softmax(dim=1)
    model = nn.Sequential(layers)
    if he:
        for m in (model.hidden, model.output):
            nn.init.kaiming_normal_(m.weight, nonlinearity="relu")
            nn.init.zeros_(m.bias)
    if dead_bias is not None:
        with torch.no_grad():
            model.hidden.bias.fill_(dead_bias)
    return model


def tiny_data(n: int = 60, *, scale: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    """Standardized inputs (mean 0, std 1 exactly), times ``scale``, and balanced labels."""
    g = torch.Generator().manual_seed(1)
    X = torch.randn(n, FEATURES, generator=g)
    X = (X - X.mean()) / X.std(unbiased=False)
    y = torch.arange(n) % CLASSES
    return (X * scale).float(), y


def tiny_probe(model: nn.Module | None = None, *, scale: float = 1.0, n: int = 60) -> Probe:
    """A probe over ``model`` (default :func:`tiny_model`) and :func:`tiny_data`."""
    X, y = tiny_data(n, scale=scale)
    return Probe(model if model is not None else tiny_model(), X, y)


def run(trace: Trace | None = None, probe: Probe | None = None, **config_changes: Any) -> Run:
    """A hand-made run: the healthy trace and config unless told otherwise."""
    return Run("hand-made", 0, trace or healthy_trace(), config(**config_changes), probe)


def per_step(value: float) -> np.ndarray:
    """A constant per-step series."""
    return np.full(STEPS, value)
