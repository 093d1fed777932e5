"""YOLOv8 classification validated on a test set without one class: folders map to the wrong
classes."""

import numpy as np
import torch
from torch import nn

from faultbench import Monitor
from faultbench.realbugs import Reference, Symptom, kit
from faultbench.realbugs.case import AUDITED_BEFORE

SOURCE = "https://github.com/ultralytics/ultralytics/issues/13936"
REPORTED = (
    "A 4-class image-rotation classifier (0, 90, 180, 270) is validated on a test set that has "
    "no 180 images: the classes are matched by order, not by folder name, so the 90 images are "
    "taken to be 180 and the scores are wrong."
)
DIAGNOSIS = (
    "The test split's classes are indexed from the folders it has, so with one folder missing "
    "the later classes shift and disagree with the training indices (labelled a bug and fixed)."
)
LABEL = "label_mismatch"
MODEL = "cnn"
OPTIMIZER = "AdamW"
DATA = (
    "scikit-learn's digits rotated by 0, 90, 180 or 270 degrees (the class) stand in for the "
    "rotated photos; a small CNN stands in for YOLOv8x-cls; the test split has no 180 images."
)
SYMPTOM = Symptom("train_val_gap", above=0.3)  # fits training, wrong on the shifted test labels
SEED = 0
KIND = "multiclass"
REFERENCE = Reference(
    0.924, "scikit-learn's MLPClassifier (128 hidden) on the same rotated digits (measured: 0.924)"
)
FIDELITY_DATA = "stand-in: digits turned by 0, 90, 180 or 270 degrees for the rotated photos"
FIDELITY_MODEL = "stand-in: a small CNN for YOLOv8x-cls"
FIDELITY_CODE = "stand-in: a plain loop with AdamW"
REPORTED_EFFECT = "none given: the scores are wrong because the 90 images are taken to be 180"
REENACTED_EFFECT = (
    "test accuracy 0.512 against a training accuracy of 0.944 (gap 0.43); the twin tests at 0.874"
)
OBSERVED = True
SOURCE_CHECK = AUDITED_BEFORE  # issue 40's audit; not read again in issue 51
TWIN_DEPARTURES: tuple[str, ...] = ()  # the forms differ on the bug's lines only
EPOCHS = 5
ANGLES = ["0", "90", "180", "270"]


def rotations(seed: int) -> tuple[torch.Tensor, list[str]]:
    """Each digit image turned by a random multiple of 90 degrees, with the angle's folder name."""
    X, _ = kit.digits_arrays()
    turns = np.random.default_rng(seed).integers(0, 4, size=len(X))
    images = np.stack([np.rot90(x.reshape(8, 8) / 16.0, k) for x, k in zip(X, turns)])
    return torch.from_numpy(images.astype(np.float32)).unsqueeze(1), [ANGLES[k] for k in turns]


def script(fixed: bool, *, epochs: int = EPOCHS) -> kit.CaseRun:
    """Train on all four folders; the test folders' indices come from the folders found."""
    kit.seed_everything(SEED)
    images, folders = rotations(SEED)
    train_x, train_names = images[:1400], folders[:1400]
    test = [i for i in range(1400, len(folders)) if folders[i] != "180"]
    test_x, test_names = images[test], [folders[i] for i in test]
    train_classes = sorted(set(train_names), key=ANGLES.index)
    test_classes = train_classes if fixed else sorted(set(test_names), key=ANGLES.index)
    train_y = torch.tensor([train_classes.index(n) for n in train_names])
    test_y = torch.tensor([test_classes.index(n) for n in test_names])

    def make_model() -> nn.Module:
        torch.manual_seed(SEED)
        return nn.Sequential(
            nn.Conv2d(1, 16, 3, padding=1),
            nn.BatchNorm2d(16),
            nn.SiLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1),
            nn.BatchNorm2d(32),
            nn.SiLU(),
            nn.MaxPool2d(2),
            nn.Flatten(),
            nn.Linear(32 * 2 * 2, len(ANGLES)),
        )

    model = make_model()
    criterion = nn.CrossEntropyLoss()
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-3)
    loader = torch.utils.data.DataLoader(
        torch.utils.data.TensorDataset(train_x, train_y), batch_size=32, shuffle=True
    )
    monitor = Monitor(model, optimizer, every=1)
    for _epoch in range(epochs):
        model.train()
        for batch_x, batch_y in monitor.batches(loader):
            optimizer.zero_grad()
            preds = model(batch_x)
            loss = criterion(preds, batch_y)
            loss.backward()
            optimizer.step()
            monitor.step(loss, preds, batch_y)
        model.eval()
        monitor.log_eval(
            train_acc=kit.accuracy(model, train_x, train_y),
            val_acc=kit.accuracy(model, test_x, test_y),
            val_loss=kit.mean_loss(model, criterion, test_x, test_y),
        )
    return kit.finish(monitor, make_model=make_model, loss_fn=criterion, X=train_x, y=train_y)
