"""Linear regression with MSELoss on predictions (n, 1) and targets (n,): the loss never nears the
optimum."""

import torch
from torch import nn

from faultbench import Monitor
from faultbench.realbugs import OWN, Reference, Symptom, kit
from faultbench.realbugs.case import AUDITED_BEFORE

SOURCE = "https://github.com/pytorch/pytorch/issues/16045"
REPORTED = (
    "Fitting y = 10 + 9 x0 - 2 x1 + noise with nn.Linear(2, 1) and MSELoss, the correct "
    "estimates are not found and the loss fails to decrease to near the global optimum of this "
    "convex problem; no error is raised."
)
DIAGNOSIS = (
    "The prediction has shape (n, 1) and the target (n,), so MSELoss broadcasts them to "
    "(n, n) and compares every prediction with every target; reshaping y to (n, 1) fixes it "
    "(PyTorch added a warning for it)."
)
LABEL = "other_fault"
MODEL = "linear"
OPTIMIZER = "SGD"
DATA = "The issue's own code and data (100 points, SGD at 0.1, 30 full-batch steps)."
SYMPTOM = Symptom("min_loss", above=10.0)  # never near the noise level (about 1)
SEED = 0
KIND = "regression"
REFERENCE = Reference(
    0.985, "ordinary least squares (scikit-learn's LinearRegression) on the issue's data: 0.985"
)
FIDELITY_DATA = OWN
FIDELITY_MODEL = OWN
FIDELITY_CODE = OWN
REPORTED_EFFECT = "none given: the loss never nears the global optimum of the convex problem"
REENACTED_EFFECT = (
    "the lowest loss is 63.5 and R² -0.001 (the mean); the twin reaches the noise level (0.94) "
    "and R² 0.985"
)
OBSERVED = True
SOURCE_CHECK = AUDITED_BEFORE  # issue 40's audit; not read again in issue 51
TWIN_DEPARTURES: tuple[str, ...] = ()  # the forms differ on the bug's lines only
EPOCHS = 30


def script(fixed: bool, *, epochs: int = EPOCHS) -> kit.CaseRun:
    """The issue's script."""
    kit.seed_everything(SEED)
    sample_size = 100
    x = torch.randn((sample_size, 2))
    eps = torch.randn(sample_size)
    y = 10 + 9 * x[:, 0] - 2 * x[:, 1] + eps
    if fixed:
        y = y.reshape(sample_size, 1)

    def make_model() -> nn.Module:
        torch.manual_seed(SEED)
        return nn.Linear(2, 1)

    model = make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loss_func = nn.MSELoss()
    monitor = Monitor(model, optimizer, every=1, kind=KIND)
    for xb, yb in monitor.batches((x, y) for _ in range(epochs)):
        optimizer.zero_grad()
        yhat = model(xb)
        loss_val = loss_func(yhat, yb)
        loss_val.backward()
        optimizer.step()
        monitor.step(loss_val)
    kit.log_scores(monitor, model, kind=KIND, train=(x, y))
    return kit.finish(monitor, make_model=make_model, loss_fn=loss_func, X=x, y=y)
