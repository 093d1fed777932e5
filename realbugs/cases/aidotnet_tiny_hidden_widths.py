"""A default 1-input network gets hidden widths 2 and 1: it predicts one constant for every
input."""

import numpy as np
import torch
from torch import nn

from faultbench import Monitor
from faultbench.realbugs import OWN, Reference, Symptom, kit
from faultbench.realbugs.case import AUDITED_BEFORE

SOURCE = "https://github.com/ooples/AiDotNet/pull/1578"
REPORTED = (
    "A 1-input regression network trained on y = 2x + 1 (70 rows, 60 epochs, mini-batches of "
    "10) predicts the same value for every x; only the output bias moves."
)
DIAGNOSIS = (
    "The default hidden widths are computed from the input size with no floor, so a 1-input "
    "network gets widths 2 and 1; such a degenerate ReLU network is easily dead everywhere "
    "and stays a constant. Flooring every hidden width at 8 fixed it (merged)."
)
LABEL = "dead_units"
MODEL = "mlp"
OPTIMIZER = "SGD"
DATA = (
    "The report's own data and schedule (70 rows of y = 2x + 1 with x in [0, 1], 60 epochs, "
    "batches of 10), re-enacted in PyTorch (the library is C#) with its Medium default "
    "[2 * inputs, inputs] = [2, 1] hidden widths, ReLU, MSE and plain SGD at 0.05; the fix "
    "floors the widths at 8."
)
SYMPTOM = Symptom("weight_change", below=1e-9, layer="0")  # only the output bias moves
SEED = 0
KIND = "regression"
REFERENCE = Reference(1.0, "ordinary least squares on x: the targets are exactly 2x + 1 (R² 1.000)")
FIDELITY_DATA = OWN
FIDELITY_MODEL = OWN
FIDELITY_CODE = "stand-in: plain SGD at 0.05 and MSE for the library's trainer"
REPORTED_EFFECT = (
    "one constant prediction (0.210) for every x, only the output bias moving; after the fix "
    "the loss fell from 4.75 to 0.99 in 60 epochs"
)
REENACTED_EFFECT = (
    "the first layer changes by 0 and R² is -0.001 (one constant); the twin's R² is 1.000"
)
OBSERVED = True
SOURCE_CHECK = AUDITED_BEFORE  # issue 40's audit; not read again in issue 51
TWIN_DEPARTURES: tuple[str, ...] = ()  # the forms differ on the bug's lines only
EPOCHS = 60
MIN_HIDDEN_WIDTH = 8


def default_layers(input_size: int, output_size: int, *, floor: bool) -> nn.Sequential:
    """LayerHelper.CreateDefaultNeuralNetworkLayers, Medium complexity."""
    widths = [2 * input_size, input_size]
    if floor:
        widths = [max(w, MIN_HIDDEN_WIDTH) for w in widths]
    layers: list[nn.Module] = []
    for width in widths:
        layers += [nn.Linear(input_size, width), nn.ReLU()]
        input_size = width
    return nn.Sequential(*layers, nn.Linear(input_size, output_size))


def script(fixed: bool, *, epochs: int = EPOCHS) -> kit.CaseRun:
    """60 epochs of mini-batches of 10."""
    kit.seed_everything(SEED)
    x = np.linspace(0, 1, 70, dtype=np.float32)[np.random.default_rng(SEED).permutation(70)]
    X = torch.from_numpy(x).unsqueeze(1)
    Y = 2 * X + 1

    def make_model() -> nn.Module:
        torch.manual_seed(SEED)
        return default_layers(1, 1, floor=fixed)

    network = make_model()
    loss_fn = nn.MSELoss()
    optimizer = torch.optim.SGD(network.parameters(), lr=0.05)
    monitor = Monitor(network, optimizer, every=1, kind=KIND)
    for _epoch in range(epochs):
        for xb, yb in monitor.batches(zip(X.split(10), Y.split(10))):
            optimizer.zero_grad()
            loss = loss_fn(network(xb), yb)
            loss.backward()
            optimizer.step()
            monitor.step(loss)
    kit.log_scores(monitor, network, kind=KIND, train=(X, Y))
    return kit.finish(monitor, make_model=make_model, loss_fn=loss_fn, X=X, y=Y)
