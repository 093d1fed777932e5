"""The DeepLearningZeroToAll lab's linear regression on eight days of raw stock prices and
volumes: without min-max scaling, the cost goes to inf, then nan.

Issue 51 kept it, its twin's second change declared (TWIN_DEPARTURES): the twin min-max
scales the rows, the fix, and also steps at 0.1 where both labs step at 1e-5, a rate the
source's thread never gives; at 1e-5 the scaled twin is not healthy (R² -11.8 after 2,001
steps, the thread's own complaint that lab 07-3's predictions do not match). The faulty
form's failure is the scale's: at the labs' own rate its cost overflows by the third step."""

import numpy as np
import torch
from torch import nn

from faultbench import Monitor
from faultbench.realbugs import OWN, Reference, Symptom, kit
from faultbench.realbugs.case import SourceCheck

SOURCE = "https://github.com/hunkim/DeepLearningZeroToAll/issues/197"
REPORTED = (
    "Lab 07-2 (linear regression on eight rows of stock data, without min-max scaling) does "
    "not work, while lab 07-3 (the same regression after min-max scaling) converges; the "
    "reporter asks why, since least squares needs no scaling."
)
DIAGNOSIS = (
    "The labs' own comment on the scaling ('very important. It does not work without it') and "
    "the maintainer's answer: min-max scaling is there purely for the optimization. One input "
    "column is the trading volume (about a million) beside prices near 820, so the first "
    "gradient steps overshoot by orders of magnitude and the cost overflows."
)
LABEL = "huge_inputs"
MODEL = "linear"
OPTIMIZER = "SGD"
DATA = (
    "The labs' own data (eight rows: open, high, volume, low, close; the close is the "
    "target), model (X W + b, W and b drawn from a standard normal) and training (mean "
    "squared error, plain gradient descent on all eight rows per step), for 200 of the "
    "2,001 steps; the fix min-max scales the rows as lab 07-3 does. Departure (declared in "
    "TWIN_DEPARTURES): the fixed twin steps at 0.1, not the labs' 1e-5, at which the scaled "
    "fit still has R² -11.8 after 2,001 steps (the issue's second complaint: the predictions "
    "do not match); no answer in the thread gives 0.1. The fit is measured on the eight rows."
)
SYMPTOM = Symptom("nonfinite_loss", above=0.0)  # the cost is inf by the third step, then nan
SEED = 777  # the labs' tf.set_random_seed(777)
KIND = "regression"
REFERENCE = Reference(
    0.971, "least squares with an intercept (numpy.linalg.lstsq) on the eight rows: R² 0.971"
)
FIDELITY_DATA = OWN
FIDELITY_MODEL = OWN
FIDELITY_CODE = "stand-in: the fixed twin's rate 0.1 for the labs' 1e-5, 200 of 2,001 steps"
REPORTED_EFFECT = "none given: lab 07-2 does not work (its printed cost becomes nan)"
REENACTED_EFFECT = (
    "the cost is 4.7e12 at the first step and inf from the third; 99% of the 200 steps' "
    "losses are not finite; the twin's R² 0.954"
)
OBSERVED = True
SOURCE_CHECK = SourceCheck(
    read=(
        "the issue thread (stored issues corpus): the reporter's question on lab 07-2 against "
        "07-3 and the maintainer's answer (min-max scaling is purely for the optimization); the "
        "labs' code was not in the corpus read, the case's constants follow the case's earlier "
        "reading of it."
    ),
    label=(
        "matches: raw columns with the volume near 1e6 beside prices near 820 are inputs far off "
        "unit scale (huge_inputs.unstandardized); the maintainer calls the scaling an "
        "optimization aid."
    ),
    mechanism=(
        "matches: raw rows diverge at the labs' rate; the twin scales them as lab 07-3 does, and "
        "also raises the rate (declared in TWIN_DEPARTURES)."
    ),
)
TWIN_DEPARTURES: tuple[str, ...] = (
    (
        "SGD at 0.1 for the labs' 1e-5 (10,000 times the rate; no answer in the thread gives it):"
        " at 1e-5 the scaled twin has R² -11.8 after 2,001 steps"
    ),
)
EPOCHS = 200  # gradient steps on the whole table

#: The labs' table: open, high, volume, low, close (the target).
TABLE = np.array(
    [
        [828.659973, 833.450012, 908100, 828.349976, 831.659973],
        [823.02002, 828.070007, 1828100, 821.655029, 828.070007],
        [819.929993, 824.400024, 1438100, 818.97998, 824.159973],
        [816, 820.958984, 1008100, 815.48999, 819.23999],
        [819.359985, 823, 1188100, 818.469971, 818.97998],
        [819, 823, 1198100, 816, 820.450012],
        [811.700012, 815.25, 1098100, 809.780029, 813.669983],
        [809.51001, 816.659973, 1398100, 804.539978, 809.559998],
    ]
)


def min_max(data: np.ndarray) -> np.ndarray:
    """Each column to [0, 1], with lab 07-3's 1e-7 in the denominator."""
    low = data.min(axis=0)
    return (data - low) / (data.max(axis=0) - low + 1e-7)


class Hypothesis(nn.Module):
    """hypothesis = X W + b, both drawn from a standard normal (tf.random_normal)."""

    def __init__(self) -> None:
        super().__init__()
        self.W = nn.Parameter(torch.randn(4, 1))
        self.b = nn.Parameter(torch.randn(1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x @ self.W + self.b


def script(fixed: bool, *, epochs: int = EPOCHS) -> kit.CaseRun:
    """for step in range(2001): sess.run([cost, hypothesis, train], feed_dict=...)."""
    kit.seed_everything(SEED)
    xy = (min_max(TABLE) if fixed else TABLE).astype(np.float32)
    X, Y = torch.from_numpy(xy[:, :-1]), torch.from_numpy(xy[:, -1:])

    def make_model() -> nn.Module:
        torch.manual_seed(SEED)
        return Hypothesis()

    def cost(hypothesis: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.square(hypothesis - y).mean()

    model = make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1 if fixed else 1e-5)
    monitor = Monitor(model, optimizer, every=1, kind=KIND)
    for x, y in monitor.batches((X, Y) for _ in range(epochs)):
        optimizer.zero_grad()
        hypothesis = model(x)
        loss = cost(hypothesis, y)
        loss.backward()
        optimizer.step()
        monitor.step(loss, hypothesis, y)
    kit.log_scores(monitor, model, kind=KIND, train=(X, Y))
    return kit.finish(monitor, make_model=make_model, loss_fn=cost, X=X, y=Y)
