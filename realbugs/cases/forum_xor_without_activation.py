"""A two-layer perceptron for XOR without a non-linearity between its layers: it cannot
learn XOR."""

import numpy as np
import torch
from torch import nn

from faultbench import Monitor
from faultbench.realbugs import OWN, Reference, Symptom, kit
from faultbench.realbugs.case import AUDITED_BEFORE

SOURCE = (
    "https://discuss.pytorch.org/t/unable-to-learn-xor-representation-using-2-layers-of-multi"
    "-layered-perceptron-mlp/13287/3"
)
REPORTED = "A two-layer perceptron does not learn the XOR representation."
DIAGNOSIS = (
    "Without a non-linearity between the two linear layers the model is linear, and a linear "
    "model cannot represent XOR; adding a ReLU between them fixes it (the accepted answer)."
)
LABEL = "other_fault"
MODEL = "mlp"
OPTIMIZER = "SGD"
DATA = (
    "Generated noisy XOR (four Gaussian clusters at (+-1, +-1), label = the signs differ); "
    "the thread's layers (input, hidden, output, sigmoid) with BCELoss and SGD at 0.5 with "
    "momentum so that it trains in seconds."
)
SYMPTOM = Symptom("final_val_acc", below=0.7)  # no better than a straight line (about 0.5)
SEED = 0
KIND = "binary"
REFERENCE = Reference(
    1.0, "the rule that made the data: whether the two coordinates' signs differ (1.000)"
)
FIDELITY_DATA = "stand-in: noisy XOR clusters for the thread's four points"
FIDELITY_MODEL = OWN
FIDELITY_CODE = "stand-in: SGD at 0.5 with momentum for the thread's plain SGD"
REPORTED_EFFECT = "none given: the perceptron does not learn XOR"
REENACTED_EFFECT = (
    "validation accuracy 0.525 and a flat loss (0.995 of its start); the twin reaches 1.000"
)
OBSERVED = True
SOURCE_CHECK = AUDITED_BEFORE  # issue 40's audit; not read again in issue 51
TWIN_DEPARTURES: tuple[str, ...] = ()  # the forms differ on the bug's lines only
EPOCHS = 60
input_dim, hidden_dim, output_dim = 2, 8, 1


def script(fixed: bool, *, epochs: int = EPOCHS) -> kit.CaseRun:
    """Full-batch training on the XOR clusters."""
    kit.seed_everything(SEED)
    rng = np.random.default_rng(SEED)
    corners = rng.choice([-1.0, 1.0], size=(600, 2))
    x = (corners + rng.normal(0, 0.3, size=(600, 2))).astype(np.float32)
    y = (corners[:, 0] != corners[:, 1]).astype(np.float32)[:, None]
    X, Y = torch.from_numpy(x), torch.from_numpy(y)
    train_x, train_y, val_x, val_y = X[:480], Y[:480], X[480:], Y[480:]

    def make_model() -> nn.Module:
        torch.manual_seed(SEED)
        between = [nn.ReLU()] if fixed else []
        return nn.Sequential(
            nn.Linear(input_dim, hidden_dim),
            *between,
            nn.Linear(hidden_dim, output_dim),
            nn.Sigmoid(),
        )

    def accuracy(inputs: torch.Tensor, targets: torch.Tensor) -> float:
        with torch.no_grad():
            return float(((model(inputs) > 0.5).float() == targets).float().mean())

    model = make_model()
    criterion = nn.BCELoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5, momentum=0.9)
    monitor = Monitor(model, optimizer, every=1)
    for epoch, (inputs, targets) in enumerate(
        monitor.batches((train_x, train_y) for _ in range(epochs))
    ):
        optimizer.zero_grad()
        loss = criterion(model(inputs), targets)
        loss.backward()
        optimizer.step()
        monitor.step(loss)
        if (epoch + 1) % 10 == 0:
            monitor.log_eval(
                train_acc=accuracy(train_x, train_y),
                val_acc=accuracy(val_x, val_y),
                val_loss=kit.mean_loss(model, criterion, val_x, val_y),
            )
    return kit.finish(monitor, make_model=make_model, loss_fn=criterion, X=train_x, y=train_y)
