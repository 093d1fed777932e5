"""pytorch-DANN's classifier ends in a softmax before CrossEntropyLoss: the model is hard
to train."""

import torch
from torch import nn

from faultbench import Monitor
from faultbench.realbugs import Symptom, kit
from faultbench.realbugs.case import AUDITED_BEFORE

SOURCE = "https://github.com/NaJaeMin92/pytorch-DANN/issues/7"
REPORTED = "The softmax layer at the end of the classifier makes the model hard to train."
DIAGNOSIS = (
    "CrossEntropyLoss already contains the log-softmax, so the classifier's own softmax is "
    "redundant and flattens the gradients; the maintainer removed it."
)
LABEL = "softmax_before_loss"
MODEL = "cnn"
OPTIMIZER = "SGD"
DATA = (
    "scikit-learn's digits as 8x8 images stand in for MNIST (the source domain); only the "
    "label classifier trains (no domain discriminator), with SGD at 0.01 and momentum 0.9."
)
SYMPTOM = Symptom("loss_ratio", above=0.5)  # the loss does not even halve
SEED = 0
KIND = "multiclass"
REFERENCE = kit.DIGITS_REFERENCE
FIDELITY_DATA = "stand-in: digits for MNIST"
FIDELITY_MODEL = "stand-in: the label classifier alone, at digit size"
FIDELITY_CODE = "stand-in: the classifier's loss alone (no domain discriminator)"
REPORTED_EFFECT = "none given: the softmax makes the model hard to train"
REENACTED_EFFECT = (
    "the loss ends at 0.77 of its start, validation accuracy 0.758; the twin's loss ends at "
    "0.008 and it validates at 0.989"
)
OBSERVED = True
SOURCE_CHECK = AUDITED_BEFORE  # issue 40's audit; not read again in issue 51
TWIN_DEPARTURES: tuple[str, ...] = ()  # the forms differ on the bug's lines only
EPOCHS = 5


class Extractor(nn.Module):
    """DANN's feature extractor, scaled to 8x8 inputs."""

    def __init__(self) -> None:
        super().__init__()
        self.extractor = nn.Sequential(
            nn.Conv2d(1, 32, kernel_size=3, padding=1),
            nn.BatchNorm2d(32),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(32, 48, kernel_size=3, padding=1),
            nn.BatchNorm2d(48),
            nn.ReLU(),
            nn.MaxPool2d(2),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.extractor(x).view(-1, 48 * 2 * 2)


class Classifier(nn.Module):
    """DANN's label classifier."""

    def __init__(self, *, softmax: bool) -> None:
        super().__init__()
        layers = [
            nn.Linear(192, 100),
            nn.ReLU(),
            nn.Linear(100, 100),
            nn.ReLU(),
            nn.Linear(100, 10),
        ]
        self.classifier = nn.Sequential(*layers, *([nn.Softmax(dim=1)] if softmax else []))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(x)


def script(fixed: bool, *, epochs: int = EPOCHS) -> kit.CaseRun:
    """Source-only training of extractor and classifier."""
    kit.seed_everything(SEED)
    X_train, y_train, X_val, y_val = kit.digits(seed=SEED, images=True)

    def make_model() -> nn.Module:
        torch.manual_seed(SEED)
        return nn.Sequential(Extractor(), Classifier(softmax=not fixed))

    model = make_model()
    class_criterion = nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    source_loader = torch.utils.data.DataLoader(
        torch.utils.data.TensorDataset(X_train, y_train), batch_size=32, shuffle=True
    )
    monitor = Monitor(model, optimizer, every=1)
    for _epoch in range(epochs):
        model.train()
        for source_image, source_label in monitor.batches(source_loader):
            optimizer.zero_grad()
            class_pred = model(source_image)
            class_loss = class_criterion(class_pred, source_label)
            class_loss.backward()
            optimizer.step()
            monitor.step(class_loss, class_pred, source_label)
        model.eval()
        monitor.log_eval(
            train_acc=kit.accuracy(model, X_train, y_train),
            val_acc=kit.accuracy(model, X_val, y_val),
            val_loss=kit.mean_loss(model, class_criterion, X_val, y_val),
        )
    return kit.finish(monitor, make_model=make_model, loss_fn=class_criterion, X=X_train, y=y_train)
