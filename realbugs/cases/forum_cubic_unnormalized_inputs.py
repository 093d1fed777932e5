"""A network fitting y = x**3 on x = 1..3999, unnormalized: it could not learn."""

import torch
from torch import nn
from torch.nn import functional as F

from faultbench import Monitor
from faultbench.realbugs import OWN, Reference, Symptom, kit
from faultbench.realbugs.case import AUDITED_BEFORE

SOURCE = (
    "https://discuss.pytorch.org/t/neural-network-could-not-learn-on-this-type-of-data-why/96648/5"
)
REPORTED = "A small network trained on inputs 1..3999 with targets x**3 could not learn the data."
DIAGNOSIS = (
    "Inputs and targets are far off unit scale; normalizing the input (and the target, "
    "un-normalizing the predictions afterwards) lets the same network learn it (ptrblck's answer)."
)
LABEL = "huge_inputs"
MODEL = "mlp"
OPTIMIZER = "Adam"
DATA = (
    "The thread's own data: inputs 1..3999 and targets x**3; "
    "the answer's network (1-50-1) and Adam."
)
SYMPTOM = Symptom("loss_ratio", above=0.5)  # the loss does not even halve
SEED = 0
KIND = "regression"
REFERENCE = Reference(
    1.0,
    (
        "numpy's polyfit of degree 3 on the normalized inputs: the targets are exactly x**3 (R² "
        "1.000)"
    ),
)
FIDELITY_DATA = OWN
FIDELITY_MODEL = OWN
FIDELITY_CODE = OWN
REPORTED_EFFECT = "none given: the network could not learn the data"
REENACTED_EFFECT = "the loss ends at 1.000 of its start, R² -0.78; the twin's at 0.019, R² 0.992"
OBSERVED = True
SOURCE_CHECK = AUDITED_BEFORE  # issue 40's audit; not read again in issue 51
TWIN_DEPARTURES: tuple[str, ...] = ()  # the forms differ on the bug's lines only
EPOCHS = 300


class Network(nn.Module):
    """The thread's network."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(in_features=1, out_features=50, bias=True)
        self.fc2 = nn.Linear(in_features=50, out_features=1, bias=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.relu(self.fc1(x)))


def script(fixed: bool, *, epochs: int = EPOCHS) -> kit.CaseRun:
    """Full-batch training, as in the thread."""
    kit.seed_everything(SEED)
    input = torch.tensor([x for x in range(1, 4000)]).float().unsqueeze(1)
    target = input**3
    if fixed:  # the answer: normalize input and target
        input = (input - input.mean()) / input.std()
        target = (target - target.mean()) / target.std()

    def make_model() -> nn.Module:
        torch.manual_seed(SEED)
        return Network()

    model = make_model()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    criterion = nn.MSELoss()
    monitor = Monitor(model, optimizer, every=1, kind=KIND)
    for _epoch, (x, y) in zip(
        range(epochs), monitor.batches((input, target) for _ in range(epochs))
    ):
        optimizer.zero_grad()
        out = model(x)
        loss = criterion(out, y)
        loss.backward()
        optimizer.step()
        monitor.step(loss)
    kit.log_scores(monitor, model, kind=KIND, train=(input, target))
    return kit.finish(monitor, make_model=make_model, loss_fn=criterion, X=input, y=target)
