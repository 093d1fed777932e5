"""TensorFlow Playground's regression at a learning rate of 1: the neurons and the output
turn NaN."""

import numpy as np
import torch
from torch import nn

from faultbench import Monitor
from faultbench.realbugs import OWN, Reference, Symptom, kit
from faultbench.realbugs.case import AUDITED_BEFORE

SOURCE = "https://github.com/tensorflow/playground/issues/3"
REPORTED = (
    "With a regression problem, tanh, batch size 1, one hidden layer of 8 neurons and a "
    "learning rate of 1, both the neurons and the output break, giving NaN."
)
DIAGNOSIS = (
    "The learning rate is too high: the linear output's error derivative is unbounded, so the "
    "network escapes the stable region and diverges; rates below 0.3 work (maintainer's answer)."
)
LABEL = "lr_too_high"
MODEL = "mlp"
OPTIMIZER = "SGD"
DATA = (
    "The Playground's plane regression, generated as it does (x, y uniform in [-6, 6], target "
    "a plane through them scaled to [-1, 1], with noise), re-enacted as a PyTorch MLP "
    "(2 inputs, 8 tanh units, one linear output) and SGD one example per step; the fix uses 0.03."
)
SYMPTOM = Symptom("nonfinite_loss", above=0.0)  # the loss is NaN
SEED = 0
KIND = "regression"
REFERENCE = Reference(
    0.949,
    "scikit-learn's LinearRegression on the plane's training half, scored on the test half: 0.949",
)
FIDELITY_DATA = OWN
FIDELITY_MODEL = OWN
FIDELITY_CODE = OWN
REPORTED_EFFECT = (
    "the neurons and the output become NaN at a learning rate of 1; rates below 0.3 work"
)
REENACTED_EFFECT = (
    "96% of the steps' losses are not finite; the twin's loss ends at 0.11 of its start, test "
    "R² 0.928"
)
OBSERVED = True
SOURCE_CHECK = AUDITED_BEFORE  # issue 40's audit; not read again in issue 51
TWIN_DEPARTURES: tuple[str, ...] = ()  # the forms differ on the bug's lines only
EPOCHS = 2


def script(fixed: bool, *, epochs: int = EPOCHS) -> kit.CaseRun:
    """One example per step, the Playground's way; test loss after each epoch."""
    kit.seed_everything(SEED)
    rng = np.random.default_rng(SEED)
    points = rng.uniform(-6, 6, size=(500, 2)).astype(np.float32)
    label = ((points[:, 0] + points[:, 1]) / 12 + rng.normal(0, 0.5, size=500) / 6).astype(
        np.float32
    )
    X, y = torch.from_numpy(points), torch.from_numpy(label).unsqueeze(1)
    train_x, train_y, test_x, test_y = X[:250], y[:250], X[250:], y[250:]
    learning_rate = 0.03 if fixed else 1.0

    def make_model() -> nn.Module:
        torch.manual_seed(SEED)
        return nn.Sequential(nn.Linear(2, 8), nn.Tanh(), nn.Linear(8, 1))

    network = make_model()
    loss_fn = nn.MSELoss()
    optimizer = torch.optim.SGD(network.parameters(), lr=learning_rate)
    monitor = Monitor(network, optimizer, every=1, kind=KIND)
    for _epoch in range(epochs):
        for point, target in monitor.batches(zip(train_x.split(1), train_y.split(1))):
            optimizer.zero_grad()
            loss = loss_fn(network(point), target)
            loss.backward()
            optimizer.step()
            monitor.step(loss)
        kit.log_scores(
            monitor,
            network,
            kind=KIND,
            train=(train_x, train_y),
            val=(test_x, test_y),
            val_loss=kit.mean_loss(network, loss_fn, test_x, test_y),
        )
    return kit.finish(monitor, make_model=make_model, loss_fn=loss_fn, X=train_x, y=train_y)
