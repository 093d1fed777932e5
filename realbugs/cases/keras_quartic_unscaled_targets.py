"""A small network fits y = x**3 but not y = x**4 on x in [-100, 100): with the targets left in
their own units (up to 1e8), it converges to an inaccurate line.

Issue 51 relabelled it from ``huge_inputs`` to ``other_fault``: the inputs are the same as in
the question's working x**3 fit, so what breaks x**4 is the targets' scale, the registry's
held-out ``raw_targets`` fault (faultbench/faults/heldout.py), whose right answer is
``other_fault`` (a held-out fault is named to no diagnoser, and a case may carry only a known
label or ``other_fault``). The twin now standardizes the targets alone, as the label says;
it was renamed from ``keras_quartic_unscaled_inputs``."""

import numpy as np
import torch
from torch import nn

from faultbench import Monitor
from faultbench.realbugs import OWN, Reference, Symptom, kit
from faultbench.realbugs.case import SourceCheck

SOURCE = "https://stackoverflow.com/questions/52800582"
REPORTED = (
    "A network (Dense 50, sigmoid, Dense 50, ELU, Dense 1; MSE, Adam, full batch) learns "
    "y = x**2 and y = x**3 on x = arange(-100, 100, 0.5), but for y = x**4 and higher powers "
    "it only converges to an inaccurate line."
)
DIAGNOSIS = (
    "The accepted answer: the inputs (up to 100) and outputs (up to 1e8) are far too large "
    "for the initial weights; the first layer's sigmoid saturates and the last layer would "
    "need an enormous number of steps to reach such outputs. Normalizing the inputs and the "
    "targets (and un-normalizing the predictions) fits it."
)
# Not huge_inputs: the question's x**3 fit trains on these very inputs, and the twin that
# standardizes the targets alone (the inputs left raw) fits x**4 (R² 0.965); the targets'
# scale is the held-out raw_targets fault, whose answer is other_fault.
LABEL = "other_fault"
MODEL = "mlp"
OPTIMIZER = "Adam"
DATA = (
    "The question's own data (x = arange(-100, 100, 0.5), y = x**4), model (Dense 50, "
    "sigmoid, Dense 50, ELU, Dense 1, Keras' glorot-uniform weights and zero biases) and "
    "training (MSE, Adam at Keras' 0.001, the whole data as one batch), for the first 500 "
    "of its 100,000 epochs. The fix standardizes the targets y only (the answer standardizes "
    "x too; the x**3 fit shows the raw x trains, and so does this twin); R² is measured on the "
    "data itself, and is the same in the targets' own units as in standardized ones."
)
SYMPTOM = Symptom("final_val_acc", below=0.5)  # R²: far from the curve
SEED = 0
KIND = "regression"
REFERENCE = Reference(1.0, "a quartic polynomial (numpy's polyfit, degree 4): exactly x**4")
FIDELITY_DATA = OWN
FIDELITY_MODEL = OWN
FIDELITY_CODE = OWN
REPORTED_EFFECT = "none given: the fit converges to an inaccurate line"
REENACTED_EFFECT = (
    "after 500 epochs R² is -0.56 and the loss is where it started (1.000); the twin, its "
    "targets standardized and its inputs raw, R² 0.965"
)
OBSERVED = True
SOURCE_CHECK = SourceCheck(
    read=(
        "the question and its answer (stored pages corpus, a mirror of the Stack Overflow page "
        "and a rewritten copy): the network and data of the question, the answer's two issues (a "
        "saturating first sigmoid from inputs up to 100, outputs up to 1e8 the last layer's "
        "weights cannot reach) and its fix (normalize inputs and targets)."
    ),
    label=(
        "matches: relabelled in issue 51 from huge_inputs: the question's x**3 fit trains on the "
        "same inputs, and the twin with the targets alone standardized fits; the targets' scale "
        "is the held-out raw_targets fault, so other_fault."
    ),
    mechanism=(
        "matches: the question's own data, model and full-batch Adam; the twin standardizes the "
        "targets only, where the answer standardizes inputs too."
    ),
)
TWIN_DEPARTURES: tuple[str, ...] = ()  # the forms differ on the bug's lines only
EPOCHS = 500


class Quartic(nn.Module):
    """The question's Sequential model, as Keras initializes it."""

    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(1, 50), nn.Sigmoid(), nn.Linear(50, 50), nn.ELU(), nn.Linear(50, 1)
        )
        for layer in self.net:
            if isinstance(layer, nn.Linear):
                nn.init.xavier_uniform_(layer.weight)
                nn.init.zeros_(layer.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


def script(fixed: bool, *, epochs: int = EPOCHS) -> kit.CaseRun:
    """model.fit(x, y, batch_size=len(x)): one full-batch Adam step per epoch."""
    kit.seed_everything(SEED)
    x = torch.from_numpy(np.arange(-100, 100, 0.5, dtype=np.float32)).unsqueeze(1)
    y = x**4
    inputs, targets = x, (y - y.mean()) / y.std() if fixed else y  # the targets' scale

    def make_model() -> nn.Module:
        torch.manual_seed(SEED)
        return Quartic()

    model = make_model()
    loss_fn = nn.MSELoss()
    optimizer = torch.optim.Adam(model.parameters(), lr=0.001)
    monitor = Monitor(model, optimizer, every=1, kind=KIND)
    for xb, yb in monitor.batches((inputs, targets) for _ in range(epochs)):
        optimizer.zero_grad()
        predictions = model(xb)
        loss = loss_fn(predictions, yb)
        loss.backward()
        optimizer.step()
        monitor.step(loss, predictions, yb)
    kit.log_scores(monitor, model, kind=KIND, train=(inputs, targets))
    return kit.finish(monitor, make_model=make_model, loss_fn=loss_fn, X=inputs, y=targets)
