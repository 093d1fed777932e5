"""A one-unit Keras regression on raw advertising budgets and sales: plain SGD at its default
rate gives a nan loss in every epoch until the data are standardized."""

import numpy as np
import torch
from torch import nn

from faultbench import Monitor
from faultbench.realbugs import OWN, Reference, Symptom, kit
from faultbench.realbugs.case import SourceCheck

SOURCE = "https://stats.stackexchange.com/questions/284189"
REPORTED = (
    "A Keras model of one linear unit (Dense(1)) fitted with SGD at its defaults, batch size "
    "1, 30 epochs, unshuffled, on one column of a small dataset predicting another gives a "
    "nan loss in every epoch; only a rate as small as 1e-7 gives a decent line."
)
DIAGNOSIS = (
    "The accepted answer: the data were not normalized; with raw columns each step's pull "
    "along the large input is far too strong, which the tiny rate only compensated for. "
    "Standardizing x and y (StandardScaler) lets the default rate fit."
)
LABEL = "huge_inputs"
MODEL = "linear"
OPTIMIZER = "SGD"
DATA = (
    "Stand-in data: the question's dataset is shown only as a plot of a 'television' column "
    "against another, so 200 points are drawn like the ISLR Advertising data's TV budgets "
    "(uniform on 0.7 to 296, thousands of dollars) and sales (7.03 + 0.0475 x plus noise of "
    "standard deviation 3.26, that data's least-squares line). The question's model (one "
    "linear unit, Keras' glorot-uniform weight and zero bias) and training (mean squared "
    "error, SGD at Keras' default 0.01, one example per step, unshuffled), for 5 of its 30 "
    "epochs; the fix standardizes x and y as the answer does. The fit is measured on the "
    "200 points."
)
SYMPTOM = Symptom("nonfinite_loss", above=0.0)  # the loss is nan from the first epoch on
SEED = 0
KIND = "regression"
REFERENCE = Reference(
    0.588, "least squares with an intercept (numpy.linalg.lstsq) on the 200 points: R² 0.588"
)
FIDELITY_DATA = "stand-in: TV budgets and sales drawn like ISLR's Advertising data"
FIDELITY_MODEL = OWN
FIDELITY_CODE = OWN
REPORTED_EFFECT = "none given: nan loss on every epoch at the default rate"
REENACTED_EFFECT = (
    "the loss overflows by the 9th of the 1,000 steps (99% not finite); the twin's R² 0.585 "
    "against least squares' 0.588"
)
OBSERVED = True
SOURCE_CHECK = SourceCheck(
    read=(
        "the question and its accepted answer (stored pages corpus): Dense(1), SGD at Keras's "
        "default, batch 1, 30 epochs, NaN every epoch, a decent line only at 1e-7; the answer: no"
        " normalization, StandardScaler on x and y and the default rate."
    ),
    label=(
        "matches: raw inputs far off unit scale (huge_inputs); a linear unit under SGD diverges "
        "by its inputs' scale, which the tiny rate only compensated."
    ),
    mechanism=(
        "matches: the question's model and loop on stand-in Advertising-like data; the twin "
        "standardizes x and y in the one fixed branch, as the answer does (y with x, not a "
        "separate change)."
    ),
)
TWIN_DEPARTURES: tuple[str, ...] = ()  # the forms differ on the bug's lines only
EPOCHS = 5


def advertising(n: int = 200) -> tuple[np.ndarray, np.ndarray]:
    """(TV budget, sales) pairs drawn like ISLR's Advertising data."""
    rng = np.random.default_rng(SEED)
    tv = rng.uniform(0.7, 296.0, n)
    sales = 7.03 + 0.0475 * tv + rng.normal(0.0, 3.26, n)
    return tv, sales


def script(fixed: bool, *, epochs: int = EPOCHS) -> kit.CaseRun:
    """model.fit(x, y, batch_size=1, epochs=30, shuffle=False) with SGD() and mse."""
    kit.seed_everything(SEED)
    x, y = advertising()
    if fixed:  # sc.fit_transform(x), sc.fit_transform(y)
        x, y = (x - x.mean()) / x.std(), (y - y.mean()) / y.std()
    X = torch.from_numpy(x.astype(np.float32)).unsqueeze(1)
    Y = torch.from_numpy(y.astype(np.float32)).unsqueeze(1)

    def make_model() -> nn.Module:
        torch.manual_seed(SEED)
        dense = nn.Linear(1, 1)
        nn.init.xavier_uniform_(dense.weight)
        nn.init.zeros_(dense.bias)
        return dense

    model = make_model()
    loss_fn = nn.MSELoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    monitor = Monitor(model, optimizer, every=1, kind=KIND)
    for _epoch in range(epochs):
        for xb, yb in monitor.batches(zip(X.split(1), Y.split(1))):
            optimizer.zero_grad()
            preds = model(xb)
            loss = loss_fn(preds, yb)
            loss.backward()
            optimizer.step()
            monitor.step(loss, preds, yb)
    kit.log_scores(monitor, model, kind=KIND, train=(X, Y))
    return kit.finish(monitor, make_model=make_model, loss_fn=loss_fn, X=X, y=Y)
