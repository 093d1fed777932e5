"""A one-weight linear regression on x = 0..199 with SGD at 0.001: the weights go to NaN."""

import torch
from torch import nn

from faultbench import Monitor
from faultbench.realbugs import OWN, Reference, Symptom, kit
from faultbench.realbugs.case import AUDITED_BEFORE

SOURCE = "https://github.com/keras-team/keras/issues/3040"
REPORTED = (
    "Training a one-unit Dense layer on x = 0..199, y = 2x with SGD (lr 0.001, batch size 1), "
    "the weights become NaN after a few iterations."
)
DIAGNOSIS = "The reporter's own conclusion: the learning rate was too high."
LABEL = "lr_too_high"
MODEL = "linear"
OPTIMIZER = "SGD"
DATA = (
    "The report's own data (x = 0..199, y = 2x); Keras' Dense(1) and SGD re-enacted as "
    "nn.Linear(1, 1) and torch.optim.SGD, one example per step; the fix lowers the rate to 1e-5."
)
SYMPTOM = Symptom("nonfinite_loss", above=0.0)  # the loss (and the weights) become NaN
SEED = 0
KIND = "regression"
REFERENCE = Reference(1.0, "least squares on x: the targets are exactly 2x (R² 1.000)")
FIDELITY_DATA = OWN
FIDELITY_MODEL = OWN
FIDELITY_CODE = OWN
REPORTED_EFFECT = "the weights become NaN within the first epoch (200 steps of one example)"
REENACTED_EFFECT = "64% of the 200 steps' losses are not finite; the twin fits with R² 1.000"
OBSERVED = True
SOURCE_CHECK = AUDITED_BEFORE  # issue 40's audit; not read again in issue 51
TWIN_DEPARTURES: tuple[str, ...] = ()  # the forms differ on the bug's lines only
EPOCHS = 1


def script(fixed: bool, *, epochs: int = EPOCHS) -> kit.CaseRun:
    """model.fit(x, y, nb_epoch=1, batch_size=1), unshuffled as Keras' fit would not shuffle
    here."""
    kit.seed_everything(SEED)
    x = torch.arange(200, dtype=torch.float32).unsqueeze(1)
    y = 2.0 * x
    lr = 1e-5 if fixed else 0.001

    def make_model() -> nn.Module:
        torch.manual_seed(SEED)
        return nn.Linear(1, 1)

    model = make_model()
    sgd = torch.optim.SGD(model.parameters(), lr=lr, momentum=0)
    loss_fn = nn.MSELoss()
    monitor = Monitor(model, sgd, every=1, kind=KIND)
    for _epoch in range(epochs):
        for xb, yb in monitor.batches(zip(x.split(1), y.split(1))):
            sgd.zero_grad()
            loss = loss_fn(model(xb), yb)
            loss.backward()
            sgd.step()
            monitor.step(loss)
    kit.log_scores(monitor, model, kind=KIND, train=(x, y))
    return kit.finish(monitor, make_model=make_model, loss_fn=loss_fn, X=x, y=y)
