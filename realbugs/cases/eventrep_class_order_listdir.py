"""rpg_event_representation_learning lists classes with listdir: train and test disagree on the
order."""

import numpy as np
import torch
from torch import nn

from faultbench import Monitor
from faultbench.realbugs import Symptom, kit
from faultbench.realbugs.case import AUDITED_BEFORE

SOURCE = "https://github.com/uzh-rpg/rpg_event_representation_learning/issues/2"
REPORTED = "Validation accuracy is much lower than expected."
DIAGNOSIS = (
    "The dataset builds its class list with listdir(root), whose order differs between the "
    "training and the test folders, so the label mapping is inconsistent; sorting the list "
    "(sorted(listdir(root))) fixed it (>50% after one epoch, 85% after 30)."
)
LABEL = "label_mismatch"
MODEL = "cnn"
OPTIMIZER = "Adam"
DATA = (
    "scikit-learn's digits as 8x8 images stand in for N-Caltech101's event representations; "
    "each split's folder listing is a fixed, different permutation of the class folder names "
    "(directory order is the file system's), and a small CNN stands in for the ResNet-34."
)
SYMPTOM = Symptom("train_val_gap", above=0.4)  # it learns training labels that do not transfer
SEED = 0
KIND = "multiclass"
REFERENCE = kit.DIGITS_REFERENCE
FIDELITY_DATA = "stand-in: digits as images for N-Caltech101's event representations"
FIDELITY_MODEL = "stand-in: a small CNN for the ResNet-34"
FIDELITY_CODE = "stand-in: a plain loop with Adam"
REPORTED_EFFECT = (
    "validation accuracy much lower than expected; after sorting the class list, above 50% "
    "after one epoch and 85% after 30"
)
REENACTED_EFFECT = (
    "training fits while validation accuracy is 0.092 (gap 0.84); the twin validates at 0.933"
)
OBSERVED = True
SOURCE_CHECK = AUDITED_BEFORE  # issue 40's audit; not read again in issue 51
TWIN_DEPARTURES: tuple[str, ...] = ()  # the forms differ on the bug's lines only
EPOCHS = 6
FOLDERS = [f"class_{name}" for name in "abcdefghij"]  # one folder per digit


def listdir(split: str) -> list[str]:
    """Directory order: what the file system happens to return for this split's folder."""
    order = np.random.default_rng(sum(map(ord, split))).permutation(len(FOLDERS))
    return [FOLDERS[i] for i in order]


def script(fixed: bool, *, epochs: int = EPOCHS) -> kit.CaseRun:
    """Each split maps its folders to indices by its own class list."""
    kit.seed_everything(SEED)
    X_train, digit_train, X_val, digit_val = kit.digits(seed=SEED, images=True)
    datasets = {}
    for split, X, digit in (("training", X_train, digit_train), ("validation", X_val, digit_val)):
        classes = sorted(listdir(split)) if fixed else listdir(split)
        label_of_folder = {folder: i for i, folder in enumerate(classes)}
        labels = torch.tensor([label_of_folder[FOLDERS[d]] for d in digit.tolist()])
        datasets[split] = (X, labels)
    (X_train, y_train), (X_val, y_val) = datasets["training"], datasets["validation"]

    def make_model() -> nn.Module:
        torch.manual_seed(SEED)
        return nn.Sequential(
            nn.Conv2d(1, 16, 3, padding=1),
            nn.ReLU(),
            nn.Conv2d(16, 32, 3, padding=1),
            nn.ReLU(),
            nn.AdaptiveAvgPool2d(2),
            nn.Flatten(),
            nn.Linear(128, len(FOLDERS)),
        )

    model = make_model()
    loss_fn = nn.CrossEntropyLoss()
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    loader = torch.utils.data.DataLoader(
        torch.utils.data.TensorDataset(X_train, y_train), batch_size=32, shuffle=True
    )
    monitor = Monitor(model, optimizer, every=1)
    for _epoch in range(epochs):
        for events, labels in monitor.batches(loader):
            optimizer.zero_grad()
            pred_labels = model(events)
            loss = loss_fn(pred_labels, labels)
            loss.backward()
            optimizer.step()
            monitor.step(loss, pred_labels, labels)
        monitor.log_eval(
            train_acc=kit.accuracy(model, X_train, y_train),
            val_acc=kit.accuracy(model, X_val, y_val),
            val_loss=kit.mean_loss(model, loss_fn, X_val, y_val),
        )
    return kit.finish(monitor, make_model=make_model, loss_fn=loss_fn, X=X_train, y=y_train)
