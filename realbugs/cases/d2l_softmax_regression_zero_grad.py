"""A d2l softmax regression without zero_grad: accuracy sinks towards 10% as training goes on."""

import torch
from torch import nn

from faultbench import Monitor
from faultbench.realbugs import Symptom, kit

SOURCE = "https://github.com/Miraclelucy/dive_into_deep_learning/issues/6"
REPORTED = (
    "The reporter's own copy of the chapter's training code, without optimizer.zero_grad(), "
    "gets a lower and lower accuracy as it trains, until it reaches 10%."
)
DIAGNOSIS = (
    "Gradients are never cleared, so each step applies the sum of every gradient so far; the "
    "reporter's comparison with the tutorial's loop (which clears them) is the diagnosis."
)
LABEL = "missing_zero_grad"
MODEL = "linear"
OPTIMIZER = "SGD"
DATA = (
    "Ten overlapping Gaussian classes from scikit-learn's make_classification (20 features) "
    "stand in for Fashion-MNIST: like it, and unlike the bundled digits, they are not linearly "
    "separable. The model is the chapter's softmax regression, one nn.Linear, with SGD at 0.1 "
    "and batches of 32 from d2l's own data_iter (the book's loader works on many more examples)."
)
SYMPTOM = Symptom("val_acc_drop", above=0.05)  # accuracy falls as training goes on
SEED = 0
EPOCHS = 40


def script(fixed: bool, *, epochs: int = EPOCHS) -> kit.CaseRun:
    """Train softmax regression the d2l way, evaluating after every epoch."""
    kit.seed_everything(SEED)
    X_train, y_train, X_val, y_val = kit.blobs(seed=SEED, classes=10, features=20, separation=1.5)

    def make_model() -> nn.Module:
        torch.manual_seed(SEED)
        linear = nn.Linear(20, 10)
        nn.init.normal_(linear.weight, std=0.01)
        return nn.Sequential(nn.Flatten(), linear)

    net = make_model()
    loss = nn.CrossEntropyLoss()
    trainer = torch.optim.SGD(net.parameters(), lr=0.1)

    def data_iter(batch_size: int, features: torch.Tensor, labels: torch.Tensor):  # d2l 3.2
        indices = torch.randperm(len(features))
        for i in range(0, len(features), batch_size):
            batch = indices[i : i + batch_size]
            yield features[batch], labels[batch]

    monitor = Monitor(net, trainer, every=1)
    for _epoch in range(epochs):
        for X, y in monitor.batches(data_iter(32, X_train, y_train)):
            y_hat = net(X)
            l = loss(y_hat, y)  # noqa: E741 (d2l's name)
            if fixed:
                trainer.zero_grad()
            l.backward()
            trainer.step()
            monitor.step(l, y_hat, y)
        monitor.log_eval(
            train_acc=kit.accuracy(net, X_train, y_train),
            val_acc=kit.accuracy(net, X_val, y_val),
            val_loss=kit.mean_loss(net, loss, X_val, y_val),
        )
    return kit.finish(monitor, make_model=make_model, loss_fn=loss, X=X_train, y=y_train)
