"""aihwkit's first examples train without clearing gradients: the loss falls, then climbs."""

import torch
from torch import nn

from faultbench import Monitor
from faultbench.realbugs import OWN, Reference, Symptom, kit
from faultbench.realbugs.case import AUDITED_BEFORE

SOURCE = "https://github.com/IBM/aihwkit/issues/446"
REPORTED = (
    "Running examples/01_simple_layer.py for 10 iterations, the loss falls from 1.03 to 0.06 "
    "and then rises again to 0.87 instead of decreasing consistently."
)
DIAGNOSIS = (
    "The examples never call opt.zero_grad(), so every backward pass adds to the previous "
    "gradients; adding zero_grad() to each iteration fixes it (confirmed by the maintainer)."
)
LABEL = "missing_zero_grad"
MODEL = "linear"
OPTIMIZER = "SGD"
DATA = (
    "The example's own two input rows and two-column targets; a digital nn.Linear(4, 2) stands "
    "in for the analog layer (AnalogLinear) and plain SGD for AnalogSGD at the same rate, for "
    "500 iterations rather than the example's 100, so that the fixed twin fits the two rows "
    "(R² 0.93; at 100 it reaches 0.40). The fit is measured on the two rows themselves."
)
SYMPTOM = Symptom("loss_ratio", above=0.5)  # the loss does not keep falling: it rises again
SEED = 0
KIND = "regression"
REFERENCE = Reference(1.0, "least squares: a linear map fits the two rows exactly (R² 1.000)")
FIDELITY_DATA = OWN
FIDELITY_MODEL = "stand-in: a digital nn.Linear for the analog AnalogLinear"
FIDELITY_CODE = "stand-in: plain SGD for AnalogSGD at the same rate"
REPORTED_EFFECT = (
    "over 10 iterations the loss falls from 1.03 to 0.06 and rises again to 0.87; with "
    "zero_grad it falls to 0.02"
)
REENACTED_EFFECT = (
    "over 500 iterations the loss falls and rises again, ending at 1.06 of its start (R² -1.18); "
    "the twin's ends at 0.02 of its start (R² 0.93)"
)
OBSERVED = True
SOURCE_CHECK = AUDITED_BEFORE  # issue 40's audit; not read again in issue 51
TWIN_DEPARTURES: tuple[str, ...] = ()  # the forms differ on the bug's lines only
EPOCHS = 500


def script(fixed: bool, *, epochs: int = EPOCHS) -> kit.CaseRun:
    """Train the example's single layer on its two examples (full batch)."""
    kit.seed_everything(SEED)
    x = torch.tensor([[0.1, 0.2, 0.4, 0.3], [0.2, 0.1, 0.1, 0.3]])
    y = torch.tensor([[1.0, 0.5], [0.7, 0.3]])

    def make_model() -> nn.Module:
        torch.manual_seed(SEED)
        return nn.Linear(4, 2)

    model = make_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loss_fn = nn.MSELoss()
    monitor = Monitor(model, opt, every=1, kind=KIND)
    for _epoch in range(epochs):
        for xb, yb in monitor.batches([(x, y)]):
            if fixed:
                opt.zero_grad()
            pred = model(xb)
            loss = loss_fn(pred, yb)
            loss.backward()
            opt.step()
            monitor.step(loss)
    kit.log_scores(monitor, model, kind=KIND, train=(x, y))
    return kit.finish(monitor, make_model=make_model, loss_fn=loss_fn, X=x, y=y)
