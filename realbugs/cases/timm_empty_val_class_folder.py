"""timm's folder parser skips an empty validation class folder: validation labels shift, accuracy
3-4%."""

import torch
from torch import nn

from faultbench import Monitor
from faultbench.realbugs import Reference, Symptom, kit
from faultbench.realbugs.case import AUDITED_BEFORE

SOURCE = "https://github.com/huggingface/pytorch-image-models/issues/957"
REPORTED = (
    "Training on one's own data, the training loss decreases normally but validation accuracy "
    "stays at 3 or 4% and the validation loss is very high; some validation class folders are "
    "empty."
)
DIAGNOSIS = (
    "The image-folder parser builds class_to_idx from the labels of the files it finds, so a "
    "class whose validation folder is empty is left out and every later class index shifts: "
    "validation labels no longer match the training mapping."
)
LABEL = "label_mismatch"
MODEL = "cnn"
OPTIMIZER = "SGD"
DATA = (
    "scikit-learn's digits as 8x8 images stand in for the user's image folders; the "
    "validation folders of classes 0 and 5 are empty (their images are left out); a small CNN "
    "stands in for the timm model. The fix builds validation labels from the training "
    "class_to_idx."
)
SYMPTOM = Symptom("train_val_gap", above=0.4)  # training fits, validation does not
SEED = 0
KIND = "multiclass"
REFERENCE = Reference(
    0.976,
    (
        "scikit-learn's LogisticRegression on the same digits split, the empty classes left out "
        "(measured: 0.976)"
    ),
)
FIDELITY_DATA = "stand-in: digits as images for the user's folders"
FIDELITY_MODEL = "stand-in: a small CNN for the timm model"
FIDELITY_CODE = "stand-in: a plain loop with timm's SGD settings"
REPORTED_EFFECT = "validation accuracy stays at 3 or 4% while the training loss falls normally"
REENACTED_EFFECT = (
    "validation accuracy 0.000 while training fits (gap 1.0); the twin validates at 0.983"
)
OBSERVED = True
SOURCE_CHECK = AUDITED_BEFORE  # issue 40's audit; not read again in issue 51
TWIN_DEPARTURES: tuple[str, ...] = ()  # the forms differ on the bug's lines only
EPOCHS = 4
EMPTY = (0, 5)  # classes whose validation folder is empty


def class_to_idx(labels: list[str]) -> dict[str, int]:
    """parser_image_folder: the sorted set of labels found among the files."""
    return {c: idx for idx, c in enumerate(sorted(set(labels)))}


def script(fixed: bool, *, epochs: int = EPOCHS) -> kit.CaseRun:
    """Folders named after the classes; each split parsed on its own."""
    kit.seed_everything(SEED)
    X_train, d_train, X_val, d_val = kit.digits(seed=SEED, images=True)
    keep = torch.tensor([d not in EMPTY for d in d_val.tolist()])
    X_val, d_val = X_val[keep], d_val[keep]
    train_names = [f"class{d}" for d in d_train.tolist()]
    val_names = [f"class{d}" for d in d_val.tolist()]
    train_map = class_to_idx(train_names)
    val_map = train_map if fixed else class_to_idx(val_names)
    y_train = torch.tensor([train_map[n] for n in train_names])
    y_val = torch.tensor([val_map[n] for n in val_names])

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
    train_loss_fn = nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=1e-4)
    loader_train = torch.utils.data.DataLoader(
        torch.utils.data.TensorDataset(X_train, y_train), batch_size=32, shuffle=True
    )
    monitor = Monitor(model, optimizer, every=1)
    for _epoch in range(epochs):
        model.train()
        for input, target in monitor.batches(loader_train):
            output = model(input)
            loss = train_loss_fn(output, target)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            monitor.step(loss, output, target)
        model.eval()
        monitor.log_eval(
            train_acc=kit.accuracy(model, X_train, y_train),
            val_acc=kit.accuracy(model, X_val, y_val),
            val_loss=kit.mean_loss(model, train_loss_fn, X_val, y_val),
        )
    return kit.finish(monitor, make_model=make_model, loss_fn=train_loss_fn, X=X_train, y=y_train)
