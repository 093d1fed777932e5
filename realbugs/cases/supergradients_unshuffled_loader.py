"""super-gradients' default dataloader params leave shuffle off: each stretch of training sees one
class."""

from typing import Any

import torch
from torch import nn

from faultbench import Monitor
from faultbench.realbugs import Symptom, kit
from faultbench.realbugs.case import AUDITED_BEFORE

SOURCE = "https://github.com/Deci-AI/super-gradients/issues/416"
REPORTED = (
    "Training on ImageNet with the default dataloader parameters, the network sees examples "
    "of a single class at a time, which quickly throws it out of the minima."
)
DIAGNOSIS = (
    "The default parameters do not pass shuffle=True, so a SequentialSampler walks the "
    "class-ordered dataset; passing shuffle=True solves it."
)
LABEL = "other_fault"
MODEL = "cnn"
OPTIMIZER = "SGD"
DATA = (
    "scikit-learn's digits as 8x8 images, stored class by class as ImageNet's folders are, "
    "stand in for ImageNet; a small CNN for the network; SGD with Nesterov momentum as in the "
    "report's training parameters."
)
SYMPTOM = Symptom("final_val_acc", below=0.5)  # the model ends knowing only the last classes
SEED = 0
KIND = "multiclass"
REFERENCE = kit.DIGITS_REFERENCE
FIDELITY_DATA = "stand-in: digits stored class by class for ImageNet's folders"
FIDELITY_MODEL = "stand-in: a small CNN for the network"
FIDELITY_CODE = "stand-in: a plain loop with the report's SGD parameters"
REPORTED_EFFECT = "none given: seeing one class at a time throws the network out of its minima"
REENACTED_EFFECT = (
    "validation accuracy 0.237 and the loss at 0.91 of its start; the twin validates at 0.994"
)
OBSERVED = True
SOURCE_CHECK = AUDITED_BEFORE  # issue 40's audit; not read again in issue 51
TWIN_DEPARTURES: tuple[str, ...] = ()  # the forms differ on the bug's lines only
EPOCHS = 4


def script(fixed: bool, *, epochs: int = EPOCHS) -> kit.CaseRun:
    """DataLoader over the class-ordered dataset, with or without shuffle."""
    kit.seed_everything(SEED)
    X_train, y_train, X_val, y_val = kit.digits(seed=SEED, images=True)
    order = torch.argsort(y_train, stable=True)
    X_train, y_train = X_train[order], y_train[order]

    def make_model() -> nn.Module:
        torch.manual_seed(SEED)
        return nn.Sequential(
            nn.Conv2d(1, 16, 3, padding=1),
            nn.BatchNorm2d(16),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1),
            nn.BatchNorm2d(32),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Flatten(),
            nn.Linear(32 * 2 * 2, 10),
        )

    model = make_model()
    loss = nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(
        model.parameters(), lr=0.01, momentum=0.9, nesterov=True, weight_decay=1e-4
    )
    dataloader_params: dict[str, Any] = {"batch_size": 32, **({"shuffle": True} if fixed else {})}
    train_loader = torch.utils.data.DataLoader(
        torch.utils.data.TensorDataset(X_train, y_train), **dataloader_params
    )
    monitor = Monitor(model, optimizer, every=1)
    for _epoch in range(epochs):
        model.train()
        for inputs, targets in monitor.batches(train_loader):
            optimizer.zero_grad()
            outputs = model(inputs)
            loss_value = loss(outputs, targets)
            loss_value.backward()
            optimizer.step()
            monitor.step(loss_value, outputs, targets)
        model.eval()
        monitor.log_eval(
            train_acc=kit.accuracy(model, X_train, y_train),
            val_acc=kit.accuracy(model, X_val, y_val),
            val_loss=kit.mean_loss(model, loss, X_val, y_val),
        )
    return kit.finish(monitor, make_model=make_model, loss_fn=loss, X=X_train, y=y_train)
