"""Fine-tuning an EfficientNet with every parameter frozen but the batch-norm layers'
(the new classifier head included): accuracy stayed near chance."""

import torch
from torch import nn

from faultbench import Monitor
from faultbench.realbugs import Symptom, kit
from faultbench.realbugs.case import SourceCheck

SOURCE = (
    "https://github.com/OrderLab/TrainCheck-Evaluation-Workloads/blob/main/"
    "silent-issue-detection/bug-reprod-scripts/pytorch-forum-84911/README.md"
)
REPORTED = (
    "A pretrained EfficientNet-b0 fine-tuned on CIFAR-100 did not learn: accuracy stayed "
    "below 1% and the loss did not fall over 40 epochs, and each epoch was very slow (the "
    "PyTorch forum thread 84911, 'Obtaining abnormal changes in loss and accuracy', as "
    "TrainCheck's evaluation re-ran and analysed it)."
)
DIAGNOSIS = (
    "The script set requires_grad = False on every parameter whose name lacks 'bn' and then "
    "on the new classifier head too, so only the batch-norm layers could learn; with them "
    "unfrozen the model starts to learn (from about 1% to 10% there, the rest of the gap "
    "coming from a second bug, images resized to 1024x1024)."
)
LABEL = "frozen_layer"
MODEL = "cnn"
OPTIMIZER = "SGD"
DATA = (
    "scikit-learn's 8x8 digits stand in for CIFAR-100 (at their own size, leaving out the "
    "report's second bug), and a small network of convolutions with batch norm and a new "
    "linear head for the pretrained EfficientNet (no pretrained weights here: the frozen "
    "layers keep their random initialization). SGD with momentum, as the report trains."
)
SYMPTOM = Symptom("final_val_acc", below=0.5)  # the model does not learn
SEED = 0
KIND = "multiclass"  # what the task predicts (the Monitor's kind)
REFERENCE = kit.DIGITS_REFERENCE
EPOCHS = 6
FIDELITY_DATA = "stand-in: scikit-learn's 8x8 digits for CIFAR-100"
FIDELITY_MODEL = "stand-in: a small conv-BN network for the pretrained EfficientNet-b0"
FIDELITY_CODE = "stand-in: our loop; the freezing rule ('bn' not in the name, the head) kept"
REPORTED_EFFECT = "accuracy below 1% on 100 classes; after the fix it starts to learn (10%)"
REENACTED_EFFECT = "validation accuracy 0.27, loss flat (0.97 of its start); the twin's 0.97"
OBSERVED = True
SOURCE_CHECK = SourceCheck(
    read=(
        "TrainCheck's evaluation README for the thread (stored code index): everything but the "
        "batch-norm layers frozen, the new head included, accuracy under 1%; unfrozen, about 10%;"
        " the larger cause the 1024x1024 resize; the forum thread itself was not read."
    ),
    label="matches: layers that should learn frozen by mistake is frozen_layer.",
    mechanism=(
        "matches: requires_grad off for every parameter without 'bn' and the head, the twin "
        "leaves them trainable; the resize, the README's other cause, is not re-enacted."
    ),
)
TWIN_DEPARTURES: tuple[str, ...] = ()  # the forms differ on the bug's lines only


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(1, 16, 3, padding=1), nn.BatchNorm2d(16)
        self.conv2, self.bn2 = nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32)
        self.pool = nn.AdaptiveAvgPool2d(2)
        self.fc = nn.Linear(128, 10)  # the replaced classifier head (EfficientNet's _fc)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.bn1(self.conv1(x)))
        x = torch.relu(self.bn2(self.conv2(x)))
        return self.fc(self.pool(x).flatten(1))


def script(fixed: bool, *, epochs: int = EPOCHS) -> kit.CaseRun:
    """Cross-entropy, SGD with momentum on the parameters left trainable."""
    kit.seed_everything(SEED)
    X_tr, y_tr, X_va, y_va = kit.digits(seed=SEED, images=True)

    def make_model() -> nn.Module:
        torch.manual_seed(SEED)
        model = Net()
        if not fixed:  # the script's freezing: everything but batch norm, the head included
            for name, param in model.named_parameters():
                if "bn" not in name:
                    param.requires_grad = False
            for param in model.fc.parameters():
                param.requires_grad = False
        return model

    model = make_model()
    loss_fn = nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loader = kit.batches_of(torch.utils.data.TensorDataset(X_tr, y_tr), 64)
    monitor = Monitor(model, optimizer, every=1, kind=KIND)
    for _epoch in range(epochs):
        for inputs, target in monitor.batches(loader):
            optimizer.zero_grad()
            out = model(inputs)
            loss = loss_fn(out, target)
            loss.backward()
            optimizer.step()
            monitor.step(loss, out, target)
        model.eval()
        monitor.log_eval(
            train_acc=kit.accuracy(model, X_tr, y_tr),
            val_acc=kit.accuracy(model, X_va, y_va),
            val_loss=kit.mean_loss(model, loss_fn, X_va, y_va),
        )
        model.train()
    return kit.finish(monitor, make_model=make_model, loss_fn=loss_fn, X=X_tr, y=y_tr)
