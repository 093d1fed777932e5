"""The TensorFlow tutorials' linear regression with its inputs stretched from [-1, 1] to
[-1, 20]: the learned weight becomes NaN at the tutorial's rate."""

import numpy as np
import torch
from torch import nn

from faultbench import Monitor
from faultbench.realbugs import OWN, Reference, Symptom, kit
from faultbench.realbugs.case import SourceCheck

SOURCE = "https://github.com/nlintz/TensorFlow-Tutorials/issues/67"
REPORTED = (
    "In 01_linear_regression, changing trX = np.linspace(-1, 1, 101) to "
    "np.linspace(-1, 20, 101), the learned weight w becomes nan."
)
DIAGNOSIS = (
    "The answer: with these inputs the tutorial's learning rate (0.01) is too high; lowering "
    "it to 0.00001 keeps w from becoming nan."
)
LABEL = "lr_too_high"
MODEL = "linear"
OPTIMIZER = "SGD"
DATA = (
    "The tutorial's own data with the reporter's change (101 points x in [-1, 20], y = 2x + "
    "0.33 noise), model (y = w * x, w from 0) and training (squared error, plain gradient "
    "descent at 0.01, one point per step), for 10 of its 100 epochs; the fix lowers the rate "
    "to 0.00001 as the answer says. The fit is measured on the 101 points."
)
SYMPTOM = Symptom("nonfinite_loss", above=0.0)  # w and the loss become nan
SEED = 0
KIND = "regression"
REFERENCE = Reference(
    0.999, "least squares through the origin (numpy.linalg.lstsq) on the 101 points: R² 0.999"
)
FIDELITY_DATA = OWN
FIDELITY_MODEL = OWN
FIDELITY_CODE = OWN
REPORTED_EFFECT = "none given: w becomes nan"
REENACTED_EFFECT = (
    "85% of the 1,010 steps' losses are not finite; the twin at 0.00001 fits with R² 0.980"
)
OBSERVED = True
SOURCE_CHECK = SourceCheck(
    read=(
        "the issue (stored issues corpus): with trX = np.linspace(-1, 20, 101) w becomes nan; a "
        "user's answer: change the learning rate to 0.00001; the issue stays open."
    ),
    label=(
        "matches: the answer names a rate too high for these inputs (lr_too_high), the suite's "
        "rule for a source whose diagnosis is the rate (realbugs/README.md: one fault, one "
        "label)."
    ),
    mechanism=(
        "matches: the tutorial's regression on the changed inputs at 0.01, the twin at the "
        "answer's 0.00001."
    ),
)
TWIN_DEPARTURES: tuple[str, ...] = ()  # the forms differ on the bug's lines only
EPOCHS = 10


class Model(nn.Module):
    """y_model = tf.multiply(X, w), w starting at 0."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.zeros(1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.w


def script(fixed: bool, *, epochs: int = EPOCHS) -> kit.CaseRun:
    """for i in range(100): for (x, y) in zip(trX, trY): sess.run(train_op, ...)."""
    kit.seed_everything(SEED)
    trX = np.linspace(-1, 20, 101)
    trY = 2 * trX + np.random.default_rng(SEED).standard_normal(trX.shape) * 0.33
    X = torch.from_numpy(trX.astype(np.float32)).unsqueeze(1)
    Y = torch.from_numpy(trY.astype(np.float32)).unsqueeze(1)

    def make_model() -> nn.Module:
        return Model()

    def cost(y_model: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.square(y - y_model).mean()

    model = make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.00001 if fixed else 0.01)
    monitor = Monitor(model, optimizer, every=1, kind=KIND)
    for _i in range(epochs):
        for x, y in monitor.batches(zip(X.split(1), Y.split(1))):
            optimizer.zero_grad()
            loss = cost(model(x), y)
            loss.backward()
            optimizer.step()
            monitor.step(loss)
    kit.log_scores(monitor, model, kind=KIND, train=(X, Y))
    return kit.finish(monitor, make_model=make_model, loss_fn=cost, X=X, y=Y)
