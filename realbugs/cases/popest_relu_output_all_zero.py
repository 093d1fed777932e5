"""A population-density network ends in a ReLU: some initializations predict 0 everywhere and
no gradient ever emerges."""

import numpy as np
import torch
from torch import nn

from faultbench import Monitor
from faultbench.realbugs import Reference, Symptom, kit
from faultbench.realbugs.case import SourceCheck

SOURCE = "https://github.com/jvargasmu/population_estimation/issues/68"
REPORTED = (
    "Sometimes the initial solution predicts only zeros, because of the ReLU activation at "
    "the output, and hence no gradients emerge."
)
DIAGNOSIS = (
    "A ReLU whose input is negative for every example outputs 0 and passes no gradient, so "
    "the network below it never moves; the maintainers proposed a soft ReLU (Softplus) at "
    "the output instead and closed the issue."
)
LABEL = "dead_units"
MODEL = "mlp"
OPTIMIZER = "Adam"
DATA = (
    "Generated census cells (4,000 cells, 6 covariates such as built-up area and night "
    "lights, a non-negative density from a hidden non-linear rule plus noise) stand in for "
    "the building-map covariates; a small MLP ending in ReLU stands in for the scale net, "
    "trained by MSE with Adam. SEED is the first seed, counting from 0, whose initialization "
    "puts the output ReLU below zero on every cell, as 'sometimes' in the report; the fix "
    "ends in Softplus."
)
SYMPTOM = Symptom("weight_change", below=1e-9, layer="0")  # the first layer never moves
SEED = 21
KIND = "regression"
REFERENCE = Reference(
    0.963,
    "scikit-learn's MLPRegressor (32, 32 hidden) on the training cells, scored on the "
    "validation cells: 0.963",
)
FIDELITY_DATA = "stand-in: generated covariates and densities for the census and building maps"
FIDELITY_MODEL = "stand-in: a 6-32-32-1 MLP ending in ReLU for the scale net"
FIDELITY_CODE = "stand-in: a plain MSE loop with Adam"
REPORTED_EFFECT = "none given: only zeros predicted and no gradient, for some initializations"
REENACTED_EFFECT = (
    "0 predicted for every cell: the first layer changes by 0 and R² is -1.82; the twin's "
    "R² is 0.925"
)
OBSERVED = True
SOURCE_CHECK = SourceCheck(
    read=(
        "the issue (stored issues corpus): sometimes the initial solution predicts only zeros "
        "because of the ReLU at the output, so no gradients emerge; the proposal to use a soft "
        "ReLU (Softplus) instead."
    ),
    label=(
        "matches: a ReLU unit dead from initialization, 0 on every input so nothing below it "
        "moves, is dead_units; here it is the output unit where the registry's summary speaks of "
        "hidden ones (the registry's softmax_before_loss.relu_output does not apply: the "
        "densities are non-negative)."
    ),
    mechanism=(
        "matches: a ReLU-ended scale net whose output is 0 on every example at initialization, "
        "the twin ending in Softplus."
    ),
)
TWIN_DEPARTURES: tuple[str, ...] = ()  # the forms differ on the bug's lines only
EPOCHS = 8
COVARIATES = 6


def cells(seed: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Standardized covariates and a non-negative density."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, COVARIATES)).astype(np.float32)
    w = rng.normal(size=COVARIATES)
    density = np.log1p(np.exp(X @ w / 2 + np.sin(X[:, 0]))) + rng.normal(0, 0.1, size=n)
    return X, np.clip(density, 0, None).astype(np.float32)[:, None]


def script(fixed: bool, *, epochs: int = EPOCHS) -> kit.CaseRun:
    """Fit the densities; evaluate R² after each epoch."""
    kit.seed_everything(SEED)
    X, density = cells(0, 4000)
    train_x, train_y = torch.from_numpy(X[:3200]), torch.from_numpy(density[:3200])
    val_x, val_y = torch.from_numpy(X[3200:]), torch.from_numpy(density[3200:])

    def make_model() -> nn.Module:
        torch.manual_seed(SEED)
        return nn.Sequential(
            nn.Linear(COVARIATES, 32),
            nn.ReLU(),
            nn.Linear(32, 32),
            nn.ReLU(),
            nn.Linear(32, 1),
            nn.Softplus() if fixed else nn.ReLU(),
        )

    model = make_model()
    loss_fn = nn.MSELoss()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    loader = kit.batches_of(torch.utils.data.TensorDataset(train_x, train_y), 64)
    monitor = Monitor(model, optimizer, every=1, kind=KIND)
    for _epoch in range(epochs):
        for x, y in monitor.batches(loader):
            optimizer.zero_grad()
            pred = model(x)
            loss = loss_fn(pred, y)
            loss.backward()
            optimizer.step()
            monitor.step(loss, pred, y)
        kit.log_scores(
            monitor,
            model,
            kind=KIND,
            train=(train_x, train_y),
            val=(val_x, val_y),
            val_loss=kit.mean_loss(model, loss_fn, val_x, val_y),
        )
    return kit.finish(monitor, make_model=make_model, loss_fn=loss_fn, X=train_x, y=train_y)
