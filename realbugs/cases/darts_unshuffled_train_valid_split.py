"""pt.darts on a local dataset: the validation loss never changes and prec@1 stays zero."""

import torch
from torch import nn

from faultbench import Monitor
from faultbench.realbugs import Reference, Symptom, kit
from faultbench.realbugs.case import AUDITED_BEFORE

SOURCE = "https://github.com/khanrc/pt.darts/issues/24"
REPORTED = (
    "On one's own local data, training loss and prec@1 behave normally, but during "
    "validation the loss stays at one value and prec@1 stays at zero."
)
DIAGNOSIS = (
    "The training set was not shuffled before being split into the search's train and "
    "validation parts, so the validation part held classes the train part never had; "
    "shuffling the indices before the split solved it (the reporter's fix)."
)
LABEL = "other_fault"
MODEL = "cnn"
OPTIMIZER = "SGD"
DATA = (
    "scikit-learn's digits as 8x8 images, stored class by class as a local image folder is, "
    "stand in for the local dataset; a small CNN for the searched network; SGD with momentum "
    "0.9 at DARTS' 0.025 and weight decay 3e-4; the split keeps DARTS' 50/50 portion."
)
SYMPTOM = Symptom("final_val_acc", below=0.1)  # prec@1 on the validation part is zero
SEED = 0
KIND = "multiclass"
REFERENCE = Reference(
    0.961, "scikit-learn's LogisticRegression on the twin's shuffled 50/50 split (measured: 0.961)"
)
FIDELITY_DATA = "stand-in: digits stored class by class for the local image folder"
FIDELITY_MODEL = "stand-in: a small CNN for the searched network"
FIDELITY_CODE = "stand-in: the weight step of the search alone, at DARTS' rates"
REPORTED_EFFECT = (
    "validation prec@1 stays at 0 and the validation loss at one value while training behaves "
    "normally"
)
REENACTED_EFFECT = (
    "validation accuracy 0.003 while the training loss falls to 0.003 of its start; the twin "
    "validates at 0.971"
)
OBSERVED = True
SOURCE_CHECK = AUDITED_BEFORE  # issue 40's audit; not read again in issue 51
TWIN_DEPARTURES: tuple[str, ...] = ()  # the forms differ on the bug's lines only
EPOCHS = 6


def script(fixed: bool, *, epochs: int = EPOCHS) -> kit.CaseRun:
    """SubsetRandomSampler on indices[:split] for training, indices[split:] for validation."""
    kit.seed_everything(SEED)
    X, digit = kit.digits_arrays()
    order = torch.argsort(torch.from_numpy(digit), stable=True)  # the folder's order
    images = torch.from_numpy(X / 16.0).view(-1, 1, 8, 8)[order]
    labels = torch.from_numpy(digit)[order]
    n_train = len(labels)
    split = n_train // 2
    indices = list(range(n_train))
    if fixed:
        indices = torch.randperm(n_train).tolist()
    train_idx, valid_idx = indices[:split], indices[split:]
    train_x, train_y, val_x, val_y = (
        images[train_idx],
        labels[train_idx],
        images[valid_idx],
        labels[valid_idx],
    )

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
    criterion = nn.CrossEntropyLoss()
    w_optim = torch.optim.SGD(model.parameters(), 0.025, momentum=0.9, weight_decay=3e-4)
    train_loader = torch.utils.data.DataLoader(
        torch.utils.data.TensorDataset(train_x, train_y), batch_size=32, shuffle=True
    )
    monitor = Monitor(model, w_optim, every=1)
    for _epoch in range(epochs):
        model.train()
        for trn_X, trn_y in monitor.batches(train_loader):
            w_optim.zero_grad()
            logits = model(trn_X)
            loss = criterion(logits, trn_y)
            loss.backward()
            w_optim.step()
            monitor.step(loss, logits, trn_y)
        model.eval()
        monitor.log_eval(
            train_acc=kit.accuracy(model, train_x, train_y),
            val_acc=kit.accuracy(model, val_x, val_y),
            val_loss=kit.mean_loss(model, criterion, val_x, val_y),
        )
    return kit.finish(monitor, make_model=make_model, loss_fn=criterion, X=train_x, y=train_y)
