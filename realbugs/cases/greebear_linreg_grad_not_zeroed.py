"""A course's hand-written linear regression updates w and b from their .grad and never zeroes
it: the loss does not keep decreasing, whatever the rate."""

import torch
from torch import nn

from faultbench import Monitor
from faultbench.realbugs import OWN, Reference, Symptom, kit
from faultbench.realbugs.case import SourceCheck

SOURCE = "https://github.com/greebear/pytorch-learning/issues/1"
REPORTED = (
    "The notebook's linear regression demo does not work: the loss is not always decreasing, "
    "even with a learning rate as small as 1e-6."
)
DIAGNOSIS = (
    "The loop subtracts lr * w.grad and lr * b.grad but never zeroes the gradients, so each "
    "backward pass adds to all the previous ones; adding w.grad.data.zero_() and "
    "b.grad.data.zero_() after the update fixes it (the maintainer's fix)."
)
LABEL = "missing_zero_grad"
MODEL = "linear"
OPTIMIZER = "SGD"
DATA = (
    "The notebook's own data and loop: 200 points x = 10 * rand, y = 3x + 5 + noise (seed "
    "10), w drawn from a normal and b at 0, loss 0.5 * (y - wx - b)**2 averaged, updates "
    "w -= 0.01 * w.grad and b -= 0.01 * b.grad (written as torch.optim.SGD at 0.01, the "
    "same update), stopping once the loss is below 0.55 as the notebook does; the first "
    "1,000 of its 10,000 iterations. The fit is measured on the 200 points (there is no "
    "held-out data)."
)
SYMPTOM = Symptom("loss_ratio", above=0.5)  # the loss does not keep decreasing
SEED = 10
KIND = "regression"
REFERENCE = Reference(
    0.987, "ordinary least squares (scikit-learn's LinearRegression) on the 200 points: 0.987"
)
FIDELITY_DATA = OWN
FIDELITY_MODEL = OWN
FIDELITY_CODE = OWN
REPORTED_EFFECT = "none given: the loss is not always decreasing, even at a learning rate of 1e-6"
REENACTED_EFFECT = (
    "after 1,000 iterations the loss is back at 1.00 of its start and R² is -8.9; the twin "
    "stops below 0.55 at iteration 951 with R² 0.986"
)
OBSERVED = True
SOURCE_CHECK = SourceCheck(
    read=(
        "the issue thread (stored issues corpus): the loss not always decreasing even at 1e-6, "
        "the reporter's fix (zero w.grad and b.grad) and the maintainer's reply that it is fixed."
    ),
    label="matches: gradients never cleared is missing_zero_grad.",
    mechanism=(
        "matches: the notebook's manual update without zeroing; the twin zeroes both gradients "
        "after the update."
    ),
)
TWIN_DEPARTURES: tuple[str, ...] = ()  # the forms differ on the bug's lines only
EPOCHS = 1000  # iterations of the full batch
STOP_BELOW = 0.55  # the notebook's stopping loss


class Line(nn.Module):
    """y = w * x + b, the notebook's two tensors."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(1))
        self.b = nn.Parameter(torch.zeros(1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.add(torch.mul(self.w, x), self.b)


def script(fixed: bool, *, epochs: int = EPOCHS) -> kit.CaseRun:
    """Full-batch gradient descent until the loss is below 0.55 or the iterations run out."""
    kit.seed_everything(SEED)
    x = torch.rand(200, 1) * 10
    y = 3 * x + (5 + torch.randn(200, 1))

    def make_model() -> nn.Module:
        torch.manual_seed(SEED)
        torch.rand(200, 1), torch.randn(200, 1)  # the data's draws come first in the notebook
        return Line()

    def loss_fn(y_pred: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return (0.5 * (target - y_pred) ** 2).mean()

    model = make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)  # w.data.sub_(lr * w.grad)
    monitor = Monitor(model, optimizer, every=1, kind=KIND)
    for xb, yb in monitor.batches((x, y) for _ in range(epochs)):
        loss = loss_fn(model(xb), yb)
        loss.backward()
        optimizer.step()
        if fixed:
            optimizer.zero_grad()  # w.grad.data.zero_(); b.grad.data.zero_()
        monitor.step(loss)
        if loss.item() < STOP_BELOW:
            break
    kit.log_scores(monitor, model, kind=KIND, train=(x, y))
    return kit.finish(monitor, make_model=make_model, loss_fn=loss_fn, X=x, y=y)
