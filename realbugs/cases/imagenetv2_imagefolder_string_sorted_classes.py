"""A test set in folders named 0, 1, ..., read with ImageFolder: its class indices follow the
names' string order (0, 1, 10, 100, ...), not the numbers the model was trained on."""

import torch
from torch import nn

from faultbench import Monitor
from faultbench.realbugs import Reference, Symptom, kit
from faultbench.realbugs.case import SourceCheck

SOURCE = "https://github.com/modestyachts/ImageNetV2/issues/10"
REPORTED = (
    "Loading the test images with datasets.ImageFolder, the class_to_idx property is not "
    "aligned with the directories' names: the folder 100, for instance, is labelled class 2, "
    "so the samples are labelled wrongly."
)
DIAGNOSIS = (
    "ImageFolder sorts the folder names as strings and numbers them in that order, while the "
    "model's classes are the folders' numbers; mapping each folder to int(name), as a "
    "user's ImageFolder subclass in the thread does, fixes it."
)
LABEL = "label_mismatch"
MODEL = "mlp"
OPTIMIZER = "SGD"
DATA = (
    "Twenty overlapping Gaussian classes (scikit-learn's make_classification, 20 features) "
    "stand in for ImageNet's classes, and a small MLP trained on their numeric labels for "
    "the pretrained network; the validation examples sit in folders named after their "
    "class number, read the ImageFolder way (indices in the names' string order) or, fixed, "
    "with class_to_idx = int(name)."
)
SYMPTOM = Symptom("train_val_gap", above=0.4)  # right in training, wrong on the folders
SEED = 0
KIND = "multiclass"
REFERENCE = Reference(
    0.883,
    "scikit-learn's MLPClassifier (64 hidden) on the same blobs split, the folders read by "
    "number: 0.883",
)
FIDELITY_DATA = "stand-in: 20 Gaussian classes for ImageNet's 1,000"
FIDELITY_MODEL = "stand-in: a small MLP for the pretrained ImageNet network"
FIDELITY_CODE = "stand-in: a plain SGD loop; the folder reading is ImageFolder's rule"
REPORTED_EFFECT = "none given: every folder from 10 on gets another class's index"
REENACTED_EFFECT = (
    "training accuracy 0.960 against 0.087 on the folders (gap 0.87); the twin validates at 0.884"
)
OBSERVED = True
SOURCE_CHECK = SourceCheck(
    read=(
        "the issue (stored issues corpus): ImageFolder's class_to_idx does not follow the "
        "folders' names (folder 100 is class 2), and a user's subclass mapping each folder to "
        "int(name); torchvision issue 714 confirms the names are sorted as strings."
    ),
    label=(
        "matches: evaluation targets under another class order than the model's is label_mismatch."
    ),
    mechanism=(
        "matches: folders read in string order against the model's numeric classes, on stand-in "
        "data and model."
    ),
)
TWIN_DEPARTURES: tuple[str, ...] = ()  # the forms differ on the bug's lines only
EPOCHS = 8
CLASSES = 20


def class_to_idx(folders: list[str], *, by_number: bool) -> dict[str, int]:
    """ImageFolder.find_classes: sorted names, numbered in order (or each name's number)."""
    names = sorted(set(folders))
    return {name: int(name) for name in names} if by_number else {n: i for i, n in enumerate(names)}


def script(fixed: bool, *, epochs: int = EPOCHS) -> kit.CaseRun:
    """Train on numeric labels; validate on the folders as the dataset class reads them."""
    kit.seed_everything(SEED)
    X_train, y_train, X_val, digit_val = kit.blobs(
        seed=SEED, classes=CLASSES, features=20, separation=2.0, samples=4000
    )
    folders = [str(int(c)) for c in digit_val]
    mapping = class_to_idx(folders, by_number=fixed)
    y_val = torch.tensor([mapping[name] for name in folders])

    def make_model() -> nn.Module:
        torch.manual_seed(SEED)
        return nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, CLASSES))

    model = make_model()
    criterion = nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    loader = kit.batches_of(torch.utils.data.TensorDataset(X_train, y_train), 64)
    monitor = Monitor(model, optimizer, every=1)
    for _epoch in range(epochs):
        for inputs, target in monitor.batches(loader):
            optimizer.zero_grad()
            output = model(inputs)
            loss = criterion(output, target)
            loss.backward()
            optimizer.step()
            monitor.step(loss, output, target)
        monitor.log_eval(
            train_acc=kit.accuracy(model, X_train, y_train),
            val_acc=kit.accuracy(model, X_val, y_val),
            val_loss=kit.mean_loss(model, criterion, X_val, y_val),
        )
    return kit.finish(monitor, make_model=make_model, loss_fn=criterion, X=X_train, y=y_train)
