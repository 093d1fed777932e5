"""A MONAI tutorial adapted to two folders: training on the first 10 files, validating on the last
10."""

import torch
from torch import nn

from faultbench import Monitor
from faultbench.realbugs import Reference, Symptom, kit
from faultbench.realbugs.case import AUDITED_BEFORE

SOURCE = "https://github.com/Project-MONAI/tutorials/issues/122"
REPORTED = "The loss falls across epochs, but the validation accuracy is always zero."
DIAGNOSIS = (
    "The file list holds one class's images and then the other's; training takes the first "
    "files (one class) and validation the last ones (the other class). Shuffling the files "
    "before splitting fixed it (confirmed by the reporter)."
)
LABEL = "other_fault"
MODEL = "cnn"
OPTIMIZER = "Adam"
DATA = (
    "Two digit classes (3 and 8) from scikit-learn's digits stand in for the two folders of "
    "brain scans (AD and DFT); the file list is ordered class by class as globbing two "
    "folders gives it; a small 2-D CNN stands in for DenseNet121 (3-D)."
)
SYMPTOM = Symptom("final_val_acc", below=0.1)  # validation accuracy is zero
SEED = 0
KIND = "multiclass"
REFERENCE = Reference(
    0.98, "scikit-learn's LogisticRegression on the twin's shuffled split (measured: 0.980)"
)
FIDELITY_DATA = "stand-in: digits 3 and 8 for the two folders of brain scans"
FIDELITY_MODEL = "stand-in: a small 2-D CNN for DenseNet121 (3-D)"
FIDELITY_CODE = "stand-in: a plain loop with Adam"
REPORTED_EFFECT = "validation accuracy 0 at every epoch while the training loss falls"
REENACTED_EFFECT = (
    "validation accuracy 0.000 while the loss falls to 3e-5 of its start; the twin validates "
    "at 0.990"
)
OBSERVED = True
SOURCE_CHECK = AUDITED_BEFORE  # issue 40's audit; not read again in issue 51
TWIN_DEPARTURES: tuple[str, ...] = ()  # the forms differ on the bug's lines only
EPOCHS = 10


def script(fixed: bool, *, epochs: int = EPOCHS) -> kit.CaseRun:
    """images = AD files + DFT files; train on the first files, validate on the last ones."""
    kit.seed_everything(SEED)
    pixels, digits = kit.digits_arrays()
    X = torch.from_numpy(pixels / 16.0).view(-1, 1, 8, 8)
    digit = torch.from_numpy(digits)
    images = torch.cat([X[digit == 3], X[digit == 8]])
    labels = torch.cat(
        [torch.zeros(int((digit == 3).sum())), torch.ones(int((digit == 8).sum()))]
    ).long()
    if fixed:  # random.shuffle(images) before the split
        order = torch.randperm(len(labels))
        images, labels = images[order], labels[order]
    train_x, train_y, val_x, val_y = images[:150], labels[:150], images[-100:], labels[-100:]

    def make_model() -> nn.Module:
        torch.manual_seed(SEED)
        return nn.Sequential(
            nn.Conv2d(1, 16, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1),
            nn.ReLU(),
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
            nn.Linear(32, 2),
        )

    model = make_model()
    loss_function = nn.CrossEntropyLoss()
    optimizer = torch.optim.Adam(model.parameters(), 3e-3)
    train_loader = torch.utils.data.DataLoader(
        torch.utils.data.TensorDataset(train_x, train_y), batch_size=16, shuffle=True
    )
    monitor = Monitor(model, optimizer, every=1)
    for _epoch in range(epochs):
        model.train()
        for inputs, batch_labels in monitor.batches(train_loader):
            optimizer.zero_grad()
            outputs = model(inputs)
            loss = loss_function(outputs, batch_labels)
            loss.backward()
            optimizer.step()
            monitor.step(loss, outputs, batch_labels)
        model.eval()
        monitor.log_eval(
            train_acc=kit.accuracy(model, train_x, train_y),
            val_acc=kit.accuracy(model, val_x, val_y),
            val_loss=kit.mean_loss(model, loss_function, val_x, val_y),
        )
    return kit.finish(monitor, make_model=make_model, loss_fn=loss_function, X=train_x, y=train_y)
