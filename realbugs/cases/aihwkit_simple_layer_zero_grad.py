"""aihwkit's first examples train without clearing gradients: the loss falls, then climbs."""

import torch
from torch import nn

from faultbench import Monitor
from faultbench.realbugs import OWN, Reference, Symptom, kit

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
    "in for the analog layer (AnalogLinear) and plain SGD for AnalogSGD at the same rate."
)
SYMPTOM = Symptom("loss_rebound", above=2.0)  # the loss ends at over twice its lowest level
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
REENACTED_EFFECT = "the loss ends at 2.59 times its lowest point (the twin's at 1.01)"
OBSERVED = True
EPOCHS = 100


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
    monitor = Monitor(model, opt, every=1)
    for _epoch in range(epochs):
        for xb, yb in monitor.batches([(x, y)]):
            if fixed:
                opt.zero_grad()
            pred = model(xb)
            loss = loss_fn(pred, yb)
            loss.backward()
            opt.step()
            monitor.step(loss)
    return kit.finish(monitor, make_model=make_model, loss_fn=loss_fn, X=x, y=y)
