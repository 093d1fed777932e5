"""A fine-tuning script divides a LongTensor count of right answers by the dataset's size:
accuracy reads 0 at every epoch."""

import torch
from torch import nn

from faultbench import Monitor
from faultbench.realbugs import Symptom, kit
from faultbench.realbugs.case import SourceCheck

SOURCE = "https://github.com/prakashjayy/pytorch_classifiers/issues/5"
REPORTED = (
    "Even after 50 epochs of training, the accuracy printed for the training and the "
    "validation phase is 0.0000 at every epoch, while both losses are small and falling."
)
DIAGNOSIS = (
    "running_corrects sums torch.sum(preds == labels), a LongTensor in PyTorch 0.4 and later, "
    "so running_corrects / dataset_size is an integer division and gives 0; counting with "
    "float(torch.sum(...)) fixed it (a user's fix in the thread)."
)
LABEL = "other_fault"
MODEL = "linear"
OPTIMIZER = "SGD"
DATA = (
    "scikit-learn's digits stand in for the user's image folders, and a linear layer on the "
    "pixels for the repository's default: a pretrained network frozen but for its new last "
    "layer. train_model's own loop (a train and a val phase per epoch, SGD with momentum "
    "0.9, StepLR(7, 0.1), batches of 64, running counts) at 0.01 rather than 0.001, a rate "
    "for a pretrained head's features that raw pixels do not have; the integer division of "
    "the PyTorch version the thread used is written out as //, which is what / did on a "
    "LongTensor then."
)
SYMPTOM = Symptom("final_val_acc", below=0.05)  # the printed accuracy is 0
SEED = 0
KIND = "multiclass"
REFERENCE = kit.DIGITS_REFERENCE
FIDELITY_DATA = "stand-in: digits for the user's image folders"
FIDELITY_MODEL = "stand-in: a linear layer for the frozen pretrained network and its new head"
FIDELITY_CODE = "stand-in: train_model's loop at SGD 0.01 for 0.001"
REPORTED_EFFECT = "accuracy 0.0000 in both phases at epoch 50, with losses of 0.0236 and 0.0234"
REENACTED_EFFECT = (
    "accuracy 0.000 in both phases at every epoch while the loss falls to 0.37 of its start; "
    "the twin counts 0.903 in training and 0.925 in validation"
)
OBSERVED = True
SOURCE_CHECK = SourceCheck(
    read=(
        "the issue (stored issues corpus): accuracy 0 after many epochs; one user: initialize "
        "running_corrects to 0.0; another: that alone did not work, float(torch.sum(...)) did."
    ),
    label=(
        "matches: accuracy miscomputed by integer division is no training fault of the known "
        "labels: other_fault."
    ),
    mechanism=(
        "matches: the counter kept as an integer tensor and divided with floor, the twin "
        "accumulating floats (the counter, the sums and the division: BUG_BRANCHES 3)."
    ),
)
TWIN_DEPARTURES: tuple[str, ...] = ()  # the forms differ on the bug's lines only
# the counter starts as a float, adds floats and is divided as a float: three places
BUG_BRANCHES = 3
EPOCHS = 8
BATCH = 64


def script(fixed: bool, *, epochs: int = EPOCHS) -> kit.CaseRun:
    """train_model: per epoch, a training phase then a validation phase, counts summed."""
    kit.seed_everything(SEED)
    X_train, y_train, X_val, y_val = kit.digits(seed=SEED)
    splits = {"train": (X_train, y_train), "val": (X_val, y_val)}
    dataset_sizes = {phase: len(y) for phase, (_, y) in splits.items()}

    def make_model() -> nn.Module:
        torch.manual_seed(SEED)
        return nn.Linear(64, 10)

    model = make_model()
    criterion = nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=7, gamma=0.1)
    monitor = Monitor(model, optimizer, every=1)

    def batches(phase: str):
        X, y = splits[phase]
        order = torch.randperm(len(y)) if phase == "train" else torch.arange(len(y))
        for i in range(0, len(y), BATCH):
            yield X[order[i : i + BATCH]], y[order[i : i + BATCH]]

    for _epoch in range(epochs):
        accuracy: dict[str, float] = {}
        for phase in ("train", "val"):
            model.train(phase == "train")
            running_corrects = torch.tensor(0) if not fixed else 0.0
            source = monitor.batches(batches(phase)) if phase == "train" else batches(phase)
            for inputs, labels in source:
                optimizer.zero_grad()
                outputs = model(inputs)
                _, preds = torch.max(outputs.data, 1)
                loss = criterion(outputs, labels)
                if phase == "train":
                    loss.backward()
                    optimizer.step()
                    monitor.step(loss, outputs, labels)
                if fixed:
                    running_corrects += float(torch.sum(preds == labels.data))
                else:
                    running_corrects += torch.sum(preds == labels.data)
            if fixed:
                accuracy[phase] = float(running_corrects) / dataset_sizes[phase]
            else:  # PyTorch 0.4's `/` on a LongTensor
                accuracy[phase] = float(running_corrects // dataset_sizes[phase])
        scheduler.step()
        monitor.log_eval(
            train_acc=accuracy["train"],
            val_acc=accuracy["val"],
            val_loss=kit.mean_loss(model, criterion, X_val, y_val),
        )
    return kit.finish(monitor, make_model=make_model, loss_fn=criterion, X=X_train, y=y_train)
