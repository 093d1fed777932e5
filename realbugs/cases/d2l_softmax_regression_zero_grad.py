"""A d2l softmax regression without zero_grad: accuracy sinks towards 10% as training goes on."""

import torch
from torch import nn

from faultbench import Monitor
from faultbench.realbugs import OWN, Reference, Symptom, kit
from faultbench.realbugs.case import AUDITED_BEFORE

SOURCE = "https://github.com/Miraclelucy/dive_into_deep_learning/issues/6"
REPORTED = (
    "The repository's concise softmax regression trains without clearing gradients and is "
    "said to work; the reporter's similar code without optimizer.zero_grad() gets a lower "
    "and lower accuracy as it trains, until it reaches 10%."
)
DIAGNOSIS = (
    "The thread has no answer. Reading the repository's code: its train_ch3 clears "
    "gradients only when params is given, and the concise version passes params=None with "
    "an optimizer, so gradients are never cleared and each step applies the sum of every "
    "gradient so far; clearing them before each backward pass is the fix."
)
LABEL = "missing_zero_grad"
MODEL = "linear"
OPTIMIZER = "SGD"
DATA = (
    "Ten overlapping Gaussian classes from scikit-learn's make_classification (20 features, "
    "12,000 examples) stand in for Fashion-MNIST: like it, and unlike the bundled digits, "
    "they are not linearly separable. The model and loop are the repository's concise "
    "softmax regression: one nn.Linear (weights drawn with std 0.01), CrossEntropyLoss, SGD "
    "at 0.1, batches of 256, and train_ch3's loop, which clears gradients only when params "
    "is given."
)
SYMPTOM = Symptom("loss_ratio", above=1.2)  # the loss rises as accuracy falls
SEED = 0
KIND = "multiclass"
REFERENCE = Reference(
    0.818, "scikit-learn's LogisticRegression on the same blobs split (measured: 0.818)"
)
FIDELITY_DATA = "stand-in: 12,000 overlapping Gaussian blobs (20 features) for Fashion-MNIST"
FIDELITY_MODEL = "stand-in: nn.Linear(20, 10) for nn.Linear(784, 10)"
FIDELITY_CODE = OWN
REPORTED_EFFECT = "accuracy lower and lower as it trains, until it reaches 10%"
REENACTED_EFFECT = (
    "the loss ends at 1.75 of its start and validation accuracy falls from 0.784 to 0.756 "
    "over 1,140 steps (not to 10%: the stand-in data do not let it fall further); the twin "
    "validates at 0.805"
)
OBSERVED = True
SOURCE_CHECK = AUDITED_BEFORE  # issue 40's audit; not read again in issue 51
TWIN_DEPARTURES: tuple[str, ...] = ()  # the forms differ on the bug's lines only
EPOCHS = 30
SAMPLES = 12_000


def script(fixed: bool, *, epochs: int = EPOCHS) -> kit.CaseRun:
    """train_ch3(net, ..., params=None, lr=0.3, optimizer) as the repository calls it."""
    kit.seed_everything(SEED)
    X_train, y_train, X_val, y_val = kit.blobs(
        seed=SEED, classes=10, features=20, separation=1.5, samples=SAMPLES
    )

    def make_model() -> nn.Module:
        torch.manual_seed(SEED)
        linear = nn.Linear(20, 10)
        nn.init.normal_(linear.weight, std=0.01)
        return nn.Sequential(nn.Flatten(), linear)

    net = make_model()
    loss = nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(net.parameters(), lr=0.1)

    def train_iter(batch_size: int):  # the book's loader: shuffled batches of tensors
        indices = torch.randperm(len(X_train))
        for i in range(0, len(X_train), batch_size):
            batch = indices[i : i + batch_size]
            yield X_train[batch], y_train[batch]

    monitor = Monitor(net, optimizer, every=1)
    for _epoch in range(epochs):
        for X, y in monitor.batches(train_iter(256)):
            y_hat = net(X)
            l = loss(y_hat, y).sum()  # noqa: E741 (the repository's name)
            if fixed:
                optimizer.zero_grad()
            l.backward()
            optimizer.step()
            monitor.step(l, y_hat, y)
        monitor.log_eval(
            train_acc=kit.accuracy(net, X_train, y_train),
            val_acc=kit.accuracy(net, X_val, y_val),
            val_loss=kit.mean_loss(net, loss, X_val, y_val),
        )
    return kit.finish(monitor, make_model=make_model, loss_fn=loss, X=X_train, y=y_train)
