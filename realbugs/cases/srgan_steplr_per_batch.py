"""SRGAN-PyTorch steps its StepLR schedulers every batch: the learning rate is near zero after a
few steps."""

import torch
from torch import nn

from faultbench import Monitor
from faultbench.realbugs import Symptom, kit
from faultbench.realbugs.case import AUDITED_BEFORE

SOURCE = "https://github.com/Lornatang/SRGAN-PyTorch/issues/1"
REPORTED = (
    "With StepLR(step_size=epochs // 2, gamma=0.1), the schedulers are stepped at every "
    "training step, so the learning rate becomes almost zero after a few steps and the model "
    "does not seem to train."
)
DIAGNOSIS = (
    "The schedulers' step() belongs at the end of each epoch; moved there, training shows "
    "good results (the maintainer: 'I found it. I will fix it.')."
)
LABEL = "other_fault"
MODEL = "cnn"
OPTIMIZER = "Adam"
DATA = (
    "A small convolutional classifier on scikit-learn's digits (8x8 images) stands in for "
    "the SRGAN generator and discriminator; Adam at 1e-3 with StepLR(step_size=epochs // 2, "
    "gamma=0.1) as in the repository."
)
SYMPTOM = Symptom("loss_ratio", above=0.8)  # training stops almost at once
SEED = 0
KIND = "multiclass"
REFERENCE = kit.DIGITS_REFERENCE
FIDELITY_DATA = "stand-in: digits for the image pairs"
FIDELITY_MODEL = "stand-in: a small convolutional classifier for the generator and discriminator"
FIDELITY_CODE = "stand-in: a classification loop with the repository's Adam and StepLR"
REPORTED_EFFECT = (
    "none given: the learning rate is almost 0 after a few steps and the model does not seem "
    "to train"
)
REENACTED_EFFECT = (
    "the loss ends at 0.998 of its start and validation accuracy is 0.145; the twin's loss "
    "ends at 0.26 and it validates at 0.916"
)
OBSERVED = True
SOURCE_CHECK = AUDITED_BEFORE  # issue 40's audit; not read again in issue 51
TWIN_DEPARTURES: tuple[str, ...] = ()  # the forms differ on the bug's lines only
# the scheduler's step leaves the batch loop and joins the epoch loop: two places
BUG_BRANCHES = 2
EPOCHS = 6


def script(fixed: bool, *, epochs: int = EPOCHS) -> kit.CaseRun:
    """Train; the scheduler is stepped per batch in the faulty form, per epoch in the fixed one."""
    kit.seed_everything(SEED)
    X_train, y_train, X_val, y_val = kit.digits(seed=SEED, images=True)

    def make_model() -> nn.Module:
        torch.manual_seed(SEED)
        return nn.Sequential(
            nn.Conv2d(1, 16, 3, padding=1),
            nn.LeakyReLU(0.2),
            nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1),
            nn.LeakyReLU(0.2),
            nn.MaxPool2d(2),
            nn.Flatten(),
            nn.Linear(32 * 2 * 2, 10),
        )

    model = make_model()
    criterion = nn.CrossEntropyLoss()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=epochs // 2, gamma=0.1)
    dataloader = torch.utils.data.DataLoader(
        torch.utils.data.TensorDataset(X_train, y_train), batch_size=32, shuffle=True
    )
    monitor = Monitor(model, optimizer, every=1)
    for _epoch in range(epochs):
        for inputs, target in monitor.batches(dataloader):
            optimizer.zero_grad()
            output = model(inputs)
            loss = criterion(output, target)
            loss.backward()
            optimizer.step()
            if not fixed:
                scheduler.step()
            monitor.step(loss, output, target)
        if fixed:
            scheduler.step()
        monitor.log_eval(
            train_acc=kit.accuracy(model, X_train, y_train),
            val_acc=kit.accuracy(model, X_val, y_val),
            val_loss=kit.mean_loss(model, criterion, X_val, y_val),
        )
    return kit.finish(monitor, make_model=make_model, loss_fn=criterion, X=X_train, y=y_train)
