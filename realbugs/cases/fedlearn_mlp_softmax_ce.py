"""A federated-learning MLP ends in softmax and feeds CrossEntropyLoss: accuracy stays lower."""

import torch
from torch import nn

from faultbench import Monitor
from faultbench.realbugs import Symptom, kit
from faultbench.realbugs.case import AUDITED_BEFORE

SOURCE = "https://github.com/shaoxiongji/federated-learning/issues/9"
REPORTED = (
    "The repository's MLP reaches about 90% accuracy on MNIST; without the softmax at the end "
    "of the model it reaches 95%."
)
DIAGNOSIS = (
    "The MLP applies softmax and its output goes into CrossEntropyLoss, which applies "
    "log-softmax itself and expects logits; the maintainer removed the softmax."
)
LABEL = "softmax_before_loss"
MODEL = "mlp"
OPTIMIZER = "SGD"
DATA = (
    "scikit-learn's digits (8x8, 10 classes) stand in for MNIST; one client trains the "
    "repository's MLP (input, 200 hidden, dropout, 10 outputs) with its local update "
    "(momentum 0.5, batches of 10), no federated averaging, at SGD 0.1 rather than the "
    "repository's 0.01: 720 steps at ten times the rate stand in for the 3,000 local steps "
    "of its 10 rounds, so the faulty form ends as far below its twin as reported."
)
SYMPTOM = Symptom("final_val_acc", below=0.92)  # markedly below what the same MLP reaches
SEED = 0
KIND = "multiclass"
REFERENCE = kit.DIGITS_REFERENCE
FIDELITY_DATA = "stand-in: digits for MNIST"
FIDELITY_MODEL = "stand-in: the repository's MLP at digit width (64-200-10)"
FIDELITY_CODE = (
    "stand-in: one client's local update at SGD 0.1 for the repository's 0.01, no averaging: "
    "720 steps at ten times the rate stand in for the 3,000 local steps of its 10 rounds"
)
REPORTED_EFFECT = "about 90% accuracy on MNIST with the softmax, 95% without"
REENACTED_EFFECT = (
    "0.886 validation accuracy with the softmax against 0.981 without (the loss ends at 0.73 "
    "of its start against 0.13)"
)
OBSERVED = True
SOURCE_CHECK = AUDITED_BEFORE  # issue 40's audit; not read again in issue 51
TWIN_DEPARTURES: tuple[str, ...] = ()  # the forms differ on the bug's lines only
EPOCHS = 5


class MLP(nn.Module):
    """The repository's MLP."""

    def __init__(self, dim_in: int, dim_hidden: int, dim_out: int, *, softmax: bool) -> None:
        super().__init__()
        self.layer_input = nn.Linear(dim_in, dim_hidden)
        self.relu = nn.ReLU()
        self.dropout = nn.Dropout()
        self.layer_hidden = nn.Linear(dim_hidden, dim_out)
        self.softmax = nn.Softmax(dim=1) if softmax else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.view(-1, x.shape[1])
        x = self.relu(self.dropout(self.layer_input(x)))
        return self.softmax(self.layer_hidden(x))


def script(fixed: bool, *, epochs: int = EPOCHS) -> kit.CaseRun:
    """One client's local update, evaluated after each local epoch."""
    kit.seed_everything(SEED)
    X_train, y_train, X_val, y_val = kit.digits(seed=SEED)

    def make_model() -> nn.Module:
        torch.manual_seed(SEED)
        return MLP(64, 200, 10, softmax=not fixed)

    net = make_model()
    loss_func = nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.5)
    ldr_train = kit.batches_of(torch.utils.data.TensorDataset(X_train, y_train), 10)
    monitor = Monitor(net, optimizer, every=1)
    for _iter in range(epochs):
        net.train()
        for images, labels in monitor.batches(ldr_train):
            net.zero_grad()
            log_probs = net(images)
            loss = loss_func(log_probs, labels)
            loss.backward()
            optimizer.step()
            monitor.step(loss, log_probs, labels)
        net.eval()
        monitor.log_eval(
            train_acc=kit.accuracy(net, X_train, y_train),
            val_acc=kit.accuracy(net, X_val, y_val),
            val_loss=kit.mean_loss(net, loss_func, X_val, y_val),
        )
    return kit.finish(monitor, make_model=make_model, loss_fn=loss_func, X=X_train, y=y_train)
