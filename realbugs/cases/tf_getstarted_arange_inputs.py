"""TensorFlow's get-started regression with x = arange(100) instead of rand(100): W and b become
NaN."""

import numpy as np
import torch
from torch import nn

from faultbench import Monitor
from faultbench.realbugs import Symptom, kit

SOURCE = "https://github.com/tensorflow/tensorflow/issues/3148"
REPORTED = (
    "In the get-started linear regression, generating x_data with np.arange(100) instead of "
    "np.random.rand(100) makes W and b become nan."
)
DIAGNOSIS = (
    "The inputs now have a mean around 50, so the demo's gradient-descent rate is far too "
    "large for them; scale the data, x_data = np.arange(100) / 100 (the maintainer's fix), "
    "or cut the rate and train much longer."
)
LABEL = "huge_inputs"
MODEL = "linear"
OPTIMIZER = "SGD"
DATA = (
    "The demo's own data (y = 0.1 x + 0.3) and model (W uniform in [-1, 1], b = 0, mean "
    "squared error, gradient descent at 0.5, 201 full-batch steps), re-enacted in PyTorch."
)
SYMPTOM = Symptom("nonfinite_loss", above=0.0)  # W, b and the loss become NaN
SEED = 0
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
    if fixed:
        x_data = (x_data / 100).astype(np.float32)
    y_data = x_data * 0.1 + 0.3
    x, y = torch.from_numpy(x_data), torch.from_numpy(y_data)

    def make_model() -> nn.Module:
        torch.manual_seed(SEED)
        return Demo()

    def loss_fn(y_pred: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return torch.mean(torch.square(y_pred - target))

    model = make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    monitor = Monitor(model, optimizer, every=1)
    for xb, yb in monitor.batches((x, y) for _ in range(epochs)):
        optimizer.zero_grad()
        loss = loss_fn(model(xb), yb)
        loss.backward()
        optimizer.step()
        monitor.step(loss)
    return kit.finish(monitor, make_model=make_model, loss_fn=loss_fn, X=x, y=y)
