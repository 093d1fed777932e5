"""A small network fits y = x**3 but not y = x**4 on x in [-100, 100): unscaled, it converges to
an inaccurate line."""

import numpy as np
import torch
from torch import nn

from faultbench import Monitor
from faultbench.realbugs import OWN, Reference, Symptom, kit

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
LABEL = "huge_inputs"
MODEL = "mlp"
OPTIMIZER = "Adam"
DATA = (
    "The question's own data (x = arange(-100, 100, 0.5), y = x**4), model (Dense 50, "
    "sigmoid, Dense 50, ELU, Dense 1, Keras' glorot-uniform weights and zero biases) and "
    "training (MSE, Adam at Keras' 0.001, the whole data as one batch), for the first 500 "
    "of its 100,000 epochs; the fix standardizes x and y as the answer does. The fit is "
    "measured on the data itself, in the targets' own units."
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
    "after 500 epochs R² is -0.56 and the loss is where it started (1.000); the twin's R² 0.941"
)
OBSERVED = True
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
    x_mean, x_std, y_mean, y_std = x.mean(), x.std(), y.mean(), y.std()
    inputs, targets = (x, y) if not fixed else ((x - x_mean) / x_std, (y - y_mean) / y_std)

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
