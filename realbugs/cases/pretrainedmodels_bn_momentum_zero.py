"""Inception's BatchNorm layers are built with momentum=0: their running statistics never move,
so the trained network is wrong in eval mode."""

import torch
from torch import nn

from faultbench import Monitor
from faultbench.realbugs import Symptom, kit
from faultbench.realbugs.case import SourceCheck

SOURCE = "https://github.com/Cadene/pretrained-models.pytorch/issues/5"
REPORTED = (
    "Both Inception models build every BatchNorm with momentum=0, which stops the running mean "
    "and variance from being updated during training: trained on another dataset, the model "
    "behaves very differently in train and in eval mode."
)
DIAGNOSIS = (
    "PyTorch's momentum is the weight of the new batch in the running statistics (TensorFlow's "
    "decay is one minus it), so momentum=0 freezes them at their initial mean 0 and variance "
    "1; the reporter dropped the extra arguments and used PyTorch's default (0.1), which the "
    "maintainer adopted."
)
LABEL = "other_fault"
MODEL = "cnn"
OPTIMIZER = "SGD"
DATA = (
    "scikit-learn's digits as 8x8 images stand in for the other dataset; a small network of "
    "the repository's BasicConv2d blocks (convolution without bias, BatchNorm2d(eps=0.001, "
    "momentum=0), ReLU) stands in for Inception, trained from scratch with SGD and momentum. "
    "Training accuracy is what the training batches score in train mode; validation runs in "
    "eval mode, as the reporter's did."
)
SYMPTOM = Symptom("train_val_gap", above=0.3)  # right in train mode, wrong in eval mode
SEED = 0
KIND = "multiclass"
REFERENCE = kit.DIGITS_REFERENCE
FIDELITY_DATA = "stand-in: digits for the user's dataset"
FIDELITY_MODEL = "stand-in: three of the repository's BasicConv2d blocks for Inception"
FIDELITY_CODE = "stand-in: a plain classification loop with SGD"
REPORTED_EFFECT = "none given: a significant discrepancy between train and eval modes"
REENACTED_EFFECT = (
    "the training batches score 0.988 in train mode and validation 0.557 in eval mode (gap "
    "0.43); the twin validates at 0.964"
)
OBSERVED = True
SOURCE_CHECK = SourceCheck(
    read=(
        "the issue (stored issues corpus): BatchNorm built with momentum=0 never updates its "
        "running statistics, so a model trained on another dataset behaves differently in train "
        "and eval; the maintainer asked which value, the reporter used PyTorch's defaults and it "
        "worked; the rest of the thread was cut off in what the corpus returned."
    ),
    label=(
        "matches: running statistics frozen by a wrong momentum are no learned layer frozen "
        "(frozen_layer) nor any other known fault: other_fault."
    ),
    mechanism=(
        "matches: the repository's BasicConv2d blocks with momentum 0, the twin with PyTorch's "
        "0.1, on digits."
    ),
)
TWIN_DEPARTURES: tuple[str, ...] = ()  # the forms differ on the bug's lines only
EPOCHS = 4


class BasicConv2d(nn.Module):
    """The repository's block: convolution, BatchNorm, ReLU."""

    def __init__(self, in_planes: int, out_planes: int, *, momentum: float) -> None:
        super().__init__()
        self.conv = nn.Conv2d(in_planes, out_planes, kernel_size=3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(out_planes, eps=0.001, momentum=momentum)
        self.relu = nn.ReLU(inplace=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.relu(self.bn(self.conv(x)))


def script(fixed: bool, *, epochs: int = EPOCHS) -> kit.CaseRun:
    """Train in train mode; validate in eval mode after each epoch."""
    kit.seed_everything(SEED)
    X_train, y_train, X_val, y_val = kit.digits(seed=SEED, images=True)
    momentum = 0.1 if fixed else 0.0  # PyTorch's default, or the repository's 0

    def make_model() -> nn.Module:
        torch.manual_seed(SEED)
        return nn.Sequential(
            BasicConv2d(1, 16, momentum=momentum),
            nn.MaxPool2d(2),
            BasicConv2d(16, 32, momentum=momentum),
            nn.MaxPool2d(2),
            BasicConv2d(32, 32, momentum=momentum),
            nn.Flatten(),
            nn.Linear(32 * 2 * 2, 10),
        )

    model = make_model()
    criterion = nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loader = kit.batches_of(torch.utils.data.TensorDataset(X_train, y_train), 32)
    monitor = Monitor(model, optimizer, every=1)
    for _epoch in range(epochs):
        model.train()
        hits = seen = 0
        for inputs, target in monitor.batches(loader):
            optimizer.zero_grad()
            output = model(inputs)
            loss = criterion(output, target)
            loss.backward()
            optimizer.step()
            monitor.step(loss, output, target)
            hits += int((output.argmax(1) == target).sum())
            seen += len(target)
        model.eval()
        monitor.log_eval(
            train_acc=hits / seen,
            val_acc=kit.accuracy(model, X_val, y_val),
            val_loss=kit.mean_loss(model, criterion, X_val, y_val),
        )
    return kit.finish(monitor, make_model=make_model, loss_fn=criterion, X=X_train, y=y_train)
