"""pytorch-meta-optimizer keeps its LSTM cells in a plain Python list: they are never optimized."""

import torch
from torch import nn

from faultbench import Monitor
from faultbench.realbugs import Symptom, kit
from faultbench.realbugs.case import AUDITED_BEFORE

SOURCE = "https://github.com/ikostrikov/pytorch-meta-optimizer/issues/11"
REPORTED = (
    "The MetaOptimizer's LayerNormLSTMCell modules are appended to a plain list, so their "
    "weights are not trained (read from the code; the loss of about 4 a user quotes in the "
    "thread was measured after the fix worked)."
)
DIAGNOSIS = (
    "Modules kept in a Python list are not registered as submodules, so model.parameters() "
    "omits them and the optimizer never updates them; holding them in nn.Sequential (or "
    "nn.ModuleList) fixed it."
)
LABEL = "frozen_layer"
MODEL = "recurrent"
OPTIMIZER = "Adam"
DATA = (
    "scikit-learn's digits read as sequences (8 rows of 8 pixels) stand in for the "
    "meta-optimizer's inputs (gradient coordinates over steps); two stacked nn.LSTMCell "
    "(not layer-normalized) between a linear input and output, as in MetaOptimizer, with "
    "Adam at 1e-2 (the repository's 1e-3 meta-trains on another task). No failure was "
    "observed: the symptom, accuracy below 0.7, is the suite's choice."
)
SYMPTOM = Symptom("final_val_acc", below=0.7)  # the model stays poor without its LSTM
SEED = 0
KIND = "multiclass"
REFERENCE = kit.DIGITS_REFERENCE
FIDELITY_DATA = "stand-in: digits read as 4 steps of 16 pixels for the gradient coordinates"
FIDELITY_MODEL = (
    "stand-in: two plain nn.LSTMCell between linear layers for the layer-normalized cells"
)
FIDELITY_CODE = (
    "stand-in: a plain classification loop with Adam at 1e-2 for the meta-training at 1e-3"
)
REPORTED_EFFECT = (
    "none given: the LSTM cells are never trained (read from the code; the thread's 'final "
    "loss about 4' was measured after the fix)"
)
REENACTED_EFFECT = "validation accuracy 0.526 with the cells untrained against the twin's 0.919"
OBSERVED = False
SOURCE_CHECK = AUDITED_BEFORE  # issue 40's audit; not read again in issue 51
TWIN_DEPARTURES: tuple[str, ...] = ()  # the forms differ on the bug's lines only
EPOCHS = 4
HIDDEN = 32
STEP = 16  # pixels per time step: two rows of the 8x8 digit


class MetaOptimizer(nn.Module):
    """Linear in, stacked LSTM cells over the sequence, linear out."""

    def __init__(self, *, registered: bool) -> None:
        super().__init__()
        self.linear1 = nn.Linear(STEP, HIDDEN)
        cells = [nn.LSTMCell(HIDDEN, HIDDEN) for _ in range(2)]
        self.lstms = nn.Sequential(*cells) if registered else cells
        self.linear2 = nn.Linear(HIDDEN, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        states = [(x.new_zeros(len(x), HIDDEN), x.new_zeros(len(x), HIDDEN)) for _ in range(2)]
        for t in range(x.size(1)):
            h = torch.tanh(self.linear1(x[:, t]))
            for i, cell in enumerate(self.lstms):
                states[i] = cell(h, states[i])
                h = states[i][0]
        return self.linear2(h)


def script(fixed: bool, *, epochs: int = EPOCHS) -> kit.CaseRun:
    """Train on the sequences; evaluate each epoch."""
    kit.seed_everything(SEED)
    X_train, y_train, X_val, y_val = (
        t.view(-1, 64 // STEP, STEP) if t.dim() == 2 else t for t in kit.digits(seed=SEED)
    )

    def make_model() -> nn.Module:
        torch.manual_seed(SEED)
        return MetaOptimizer(registered=fixed)

    meta_optimizer = make_model()
    optimizer = torch.optim.Adam(meta_optimizer.parameters(), lr=1e-2)
    criterion = nn.CrossEntropyLoss()
    loader = kit.batches_of(torch.utils.data.TensorDataset(X_train, y_train), 32)
    monitor = Monitor(meta_optimizer, optimizer, every=1)
    for _epoch in range(epochs):
        for x, y in monitor.batches(loader):
            optimizer.zero_grad()
            out = meta_optimizer(x)
            loss = criterion(out, y)
            loss.backward()
            optimizer.step()
            monitor.step(loss, out, y)
        monitor.log_eval(
            train_acc=kit.accuracy(meta_optimizer, X_train, y_train),
            val_acc=kit.accuracy(meta_optimizer, X_val, y_val),
            val_loss=kit.mean_loss(meta_optimizer, criterion, X_val, y_val),
        )
    return kit.finish(monitor, make_model=make_model, loss_fn=criterion, X=X_train, y=y_train)
