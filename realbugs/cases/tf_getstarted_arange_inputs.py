"""TensorFlow's get-started regression with x = arange(100) instead of rand(100): W and b become
NaN."""

import numpy as np
import torch
from torch import nn

from faultbench import Monitor
from faultbench.realbugs import OWN, Reference, Symptom, kit
from faultbench.realbugs.case import AUDITED_BEFORE

SOURCE = "https://github.com/tensorflow/tensorflow/issues/3148"
REPORTED = (
    "In the get-started linear regression, generating x_data with np.arange(100) instead of "
    "np.random.rand(100) makes W and b become nan."
)
DIAGNOSIS = (
    "The maintainer: with inputs of mean around 50, the demo's gradient-descent rate is too "
    "high for stable convergence; scale the data (x_data = np.arange(100) / 100) or reduce "
    "the rate to 0.0001 and take about 40,000 iterations. Labelled as keras-team/keras#3040 "
    "is, the same fault (raw arange inputs, plain SGD, NaN): both diagnoses name a rate too "
    "high for inputs on this scale."
)
LABEL = "lr_too_high"
MODEL = "linear"
OPTIMIZER = "SGD"
DATA = (
    "The demo's own data (y = 0.1 x + 0.3) and model (W uniform in [-1, 1], b = 0, mean "
    "squared error, gradient descent at 0.5, 201 full-batch steps), re-enacted in PyTorch; "
    "the fixed twin takes the maintainer's lower rate, 0.0001, for the same 201 steps."
)
SYMPTOM = Symptom("nonfinite_loss", above=0.0)  # W, b and the loss become NaN
SEED = 0
KIND = "regression"
REFERENCE = Reference(1.0, "least squares on x: the targets are exactly 0.1 x + 0.3 (R² 1.000)")
FIDELITY_DATA = OWN
FIDELITY_MODEL = OWN
FIDELITY_CODE = OWN
REPORTED_EFFECT = "none given: W and b become nan"
REENACTED_EFFECT = (
    "98% of the 201 steps' losses are not finite; the twin at 0.0001 fits with R² 0.997"
)
OBSERVED = True
SOURCE_CHECK = AUDITED_BEFORE  # issue 40's audit; not read again in issue 51
TWIN_DEPARTURES: tuple[str, ...] = ()  # the forms differ on the bug's lines only
EPOCHS = 201


class Demo(nn.Module):
    """y = W * x + b."""

    def __init__(self) -> None:
        super().__init__()
        self.W = nn.Parameter(torch.empty(1).uniform_(-1.0, 1.0))
        self.b = nn.Parameter(torch.zeros(1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.W * x + self.b


def script(fixed: bool, *, epochs: int = EPOCHS) -> kit.CaseRun:
    """201 steps of gradient descent on the whole data."""
    kit.seed_everything(SEED)
    x_data = np.arange(100).astype(np.float32)
    y_data = x_data * 0.1 + 0.3
    x, y = torch.from_numpy(x_data), torch.from_numpy(y_data)

    def make_model() -> nn.Module:
        torch.manual_seed(SEED)
        return Demo()

    def loss_fn(y_pred: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return torch.mean(torch.square(y_pred - target))

    model = make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-4 if fixed else 0.5)
    monitor = Monitor(model, optimizer, every=1, kind=KIND)
    for xb, yb in monitor.batches((x, y) for _ in range(epochs)):
        optimizer.zero_grad()
        loss = loss_fn(model(xb), yb)
        loss.backward()
        optimizer.step()
        monitor.step(loss)
    kit.log_scores(monitor, model, kind=KIND, train=(x, y))
    return kit.finish(monitor, make_model=make_model, loss_fn=loss_fn, X=x, y=y)
