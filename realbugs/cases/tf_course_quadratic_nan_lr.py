"""The Stanford TensorFlow course's quadratic regression exercise: every epoch's loss is NaN."""

import numpy as np
import torch
from torch import nn

from faultbench import Monitor
from faultbench.realbugs import Symptom, kit

SOURCE = "https://github.com/chiphuyen/stanford-tensorflow-tutorials/issues/22"
REPORTED = (
    "Extending lecture 3's linear regression to the quadratic model Y = X*X*w + X*u + b, every "
    "epoch's loss is NaN."
)
DIAGNOSIS = (
    "The learning rate (the lecture's 0.001) is too high for the quadratic term; reducing it "
    "to about 1e-5 solves the problem (the accepted answer)."
)
LABEL = "lr_too_high"
MODEL = "linear"
OPTIMIZER = "SGD"
DATA = (
    "Generated stand-in for the lecture's Chicago fire-and-theft data: 42 areas with a fire "
    "rate between 2 and 40 per 1,000 housing units and a theft count that grows with it; the "
    "TF graph re-enacted as three scalar parameters and torch.optim.SGD, one example per step. "
    "On these values the answer's 1e-5 still diverges (as a later comment in the thread "
    "observed), so the fixed twin uses 5e-7."
)
SYMPTOM = Symptom("nonfinite_loss", above=0.0)  # the loss is NaN
SEED = 0
EPOCHS = 20


class Quadratic(nn.Module):
    """Y_predicted = X * X * w + X * u + b, with w, u and b starting at 0 as in the lecture."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.zeros(1))
        self.u = nn.Parameter(torch.zeros(1))
        self.b = nn.Parameter(torch.zeros(1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * x * self.w + x * self.u + self.b


def script(fixed: bool, *, epochs: int = EPOCHS) -> kit.CaseRun:
    """Squared error, gradient descent one sample at a time, for 20 epochs."""
    kit.seed_everything(SEED)
    rng = np.random.default_rng(SEED)
    fire = rng.uniform(2, 40, size=42).astype(np.float32)
    theft = (1.5 * fire + 15 + rng.normal(0, 8, size=42)).astype(np.float32)
    X, Y = torch.from_numpy(fire).unsqueeze(1), torch.from_numpy(theft).unsqueeze(1)
    learning_rate = 5e-7 if fixed else 0.001

    def make_model() -> nn.Module:
        return Quadratic()

    def loss_fn(Y_predicted: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.square(y - Y_predicted).mean()

    model = make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=learning_rate)
    monitor = Monitor(model, optimizer, every=1)
    for _epoch in range(epochs):
        for x, y in monitor.batches(zip(X.split(1), Y.split(1))):
            optimizer.zero_grad()
            loss = loss_fn(model(x), y)
            loss.backward()
            optimizer.step()
            monitor.step(loss)
    return kit.finish(monitor, make_model=make_model, loss_fn=loss_fn, X=X, y=Y)
