"""deep-cross-attention's aggregator starts from zero weights, no bias, then ReLU: it never gets a
gradient."""

import torch
from torch import nn

from faultbench import Monitor
from faultbench.realbugs import Symptom, kit
from faultbench.realbugs.case import AUDITED_BEFORE

SOURCE = "https://github.com/lucidrains/deep-cross-attention/issues/2"
REPORTED = (
    "The aggregation network's linear layer is zero-initialized and has no bias, followed by a "
    "ReLU: its output is 0 and no gradient ever moves it off zero, so the module does nothing."
)
DIAGNOSIS = (
    "A ReLU on a zero pre-activation passes no gradient, so a zero-initialized, bias-free "
    "layer before it is dead from the start; the maintainer changed it to a small initialization."
)
LABEL = "dead_units"
MODEL = "mlp"
OPTIMIZER = "Adam"
DATA = (
    "scikit-learn's digits stand in for the token stream: each example's 64 pixels are read as "
    "4 'layer outputs' of 16 values, the aggregator (RMSNorm, bias-free linear, ReLU) weighs "
    "them into one vector, and a linear head classifies it."
)
SYMPTOM = Symptom("relu_inactive", above=0.99)  # every ReLU unit outputs 0
SEED = 0
KIND = "multiclass"
REFERENCE = kit.DIGITS_REFERENCE
FIDELITY_DATA = "stand-in: digits read as 4 layer outputs of 16 values for the token stream"
FIDELITY_MODEL = (
    "stand-in: the aggregator and a linear head for the deep-cross-attention transformer"
)
FIDELITY_CODE = "stand-in: a plain classification loop with Adam at 1e-3"
REPORTED_EFFECT = "none given: the aggregator's output is 0 and never moves (read from the code)"
REENACTED_EFFECT = (
    "every ReLU unit outputs 0 (share 1.0) and validation accuracy is 0.078; the twin's share "
    "is 0.33 and it validates at 0.916"
)
OBSERVED = False
SOURCE_CHECK = AUDITED_BEFORE  # issue 40's audit; not read again in issue 51
TWIN_DEPARTURES: tuple[str, ...] = ()  # the forms differ on the bug's lines only
EPOCHS = 10
LAYERS, DIM = 4, 16


class Aggregate(nn.Module):
    """Weights for each layer output, from the layer outputs themselves (the GRN's to_aggregate)."""

    def __init__(self, *, small_init: bool) -> None:
        super().__init__()
        self.norm = nn.RMSNorm(LAYERS * DIM)
        linear = nn.Linear(LAYERS * DIM, LAYERS * DIM, bias=False)
        if small_init:
            nn.init.normal_(linear.weight, std=1e-2)
        else:
            nn.init.zeros_(linear.weight)
        self.to_aggregate = nn.Sequential(linear, nn.ReLU())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weights = self.to_aggregate(self.norm(x)).view(-1, LAYERS, DIM)
        return (weights * x.view(-1, LAYERS, DIM)).sum(dim=1)


def script(fixed: bool, *, epochs: int = EPOCHS) -> kit.CaseRun:
    """Train the aggregator and head together."""
    kit.seed_everything(SEED)
    X_train, y_train, X_val, y_val = kit.digits(seed=SEED)

    def make_model() -> nn.Module:
        torch.manual_seed(SEED)
        return nn.Sequential(Aggregate(small_init=fixed), nn.Linear(DIM, 10))

    model = make_model()
    criterion = nn.CrossEntropyLoss()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    loader = torch.utils.data.DataLoader(
        torch.utils.data.TensorDataset(X_train, y_train), batch_size=32, shuffle=True
    )
    monitor = Monitor(model, optimizer, every=1)
    for _epoch in range(epochs):
        for x, y in monitor.batches(loader):
            optimizer.zero_grad()
            logits = model(x)
            loss = criterion(logits, y)
            loss.backward()
            optimizer.step()
            monitor.step(loss, logits, y)
        monitor.log_eval(
            train_acc=kit.accuracy(model, X_train, y_train),
            val_acc=kit.accuracy(model, X_val, y_val),
            val_loss=kit.mean_loss(model, criterion, X_val, y_val),
        )
    return kit.finish(monitor, make_model=make_model, loss_fn=criterion, X=X_train, y=y_train)
