"""distiller's --resume loaded the model but not the optimizer: the rate went back to its
initial value after 100 epochs."""

import torch
from torch import nn

from faultbench import Monitor
from faultbench.realbugs import Symptom, kit
from faultbench.realbugs.case import SourceCheck

SOURCE = "https://github.com/IntelLabs/distiller/issues/145"
REPORTED = (
    "Training MobileNet, the run was paused after about 100 epochs and resumed with the same "
    "arguments and --resume=checkpoint: the learning rate was reset to its initial value "
    "instead of continuing from epoch 100's."
)
DIAGNOSIS = (
    "The reporter found that the checkpoint loader did not load the optimizer at all: the "
    "resumed run's optimizer started with the initial rate and no momentum buffers; their fix "
    "(pull request 182, merged) loads the optimizer's state from the checkpoint (a duplicate "
    "of issue 70). The thread does not say the reporter is a maintainer (issue 51)."
)
LABEL = "resume_without_state"
MODEL = "cnn"
OPTIMIZER = "SGD"
DATA = (
    "scikit-learn's 8x8 digits stand in for ImageNet and a two-convolution network for "
    "MobileNet; SGD with momentum at 0.2, divided by 10 at half of the 14 epochs (the step "
    "schedule of such runs), paused and resumed at 80%. The faulty form's fresh optimizer is "
    "the same SGD object emptied and set back to the initial rate (so the Monitor keeps "
    "watching it)."
)
SYMPTOM = Symptom("loss_rebound", above=1.5)  # the loss climbs back after the resume
SEED = 0
KIND = "multiclass"  # what the task predicts (the Monitor's kind)
REFERENCE = kit.DIGITS_REFERENCE
EPOCHS = 14
FIDELITY_DATA = "stand-in: scikit-learn's 8x8 digits for ImageNet"
FIDELITY_MODEL = "stand-in: a two-convolution network for MobileNet"
FIDELITY_CODE = "stand-in: our loop; the resume restores the weights only"
REPORTED_EFFECT = "the learning rate back at its initial value after 100 epochs (no loss given)"
REENACTED_EFFECT = "last tenth's loss 1.7 times its lowest (twin 1.24); validation accuracy alike"
OBSERVED = True
SOURCE_CHECK = SourceCheck(
    read=(
        "the issue thread and the fix's pull requests 169 and 182 (stored issues corpus): the "
        "reporter found load_checkpoint ignored the optimizer and wrote the fix (182 merged); the"
        " thread does not say the reporter is a maintainer, and the diagnosis no longer says so."
    ),
    label="matches: a resume that restores no optimizer state is resume_without_state.",
    mechanism=(
        "matches: the checkpoint's optimizer state is not loaded, the twin loads it, on stand-in "
        "data and model."
    ),
)
TWIN_DEPARTURES: tuple[str, ...] = ()  # the forms differ on the bug's lines only
INITIAL_LR, DECAY_AT, RESUME_AT = 0.2, 0.5, 0.8


def network() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(1, 8, 3, padding=1),
        nn.ReLU(),
        nn.Conv2d(8, 16, 3, padding=1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(2),
        nn.Flatten(),
        nn.Linear(64, 10),
    )


def script(fixed: bool, *, epochs: int = EPOCHS) -> kit.CaseRun:
    """SGD with momentum and a step schedule, paused and resumed at RESUME_AT."""
    kit.seed_everything(SEED)
    X_tr, y_tr, X_va, y_va = kit.digits(seed=SEED, images=True)

    def make_model() -> nn.Module:
        torch.manual_seed(SEED)
        return network()

    model = make_model()
    loss_fn = nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=INITIAL_LR, momentum=0.9)
    scheduler = torch.optim.lr_scheduler.MultiStepLR(optimizer, [round(DECAY_AT * epochs)], 0.1)
    loader = kit.batches_of(torch.utils.data.TensorDataset(X_tr, y_tr), 64)
    monitor = Monitor(model, optimizer, every=1, kind=KIND)
    for epoch in range(epochs):
        if epoch == round(RESUME_AT * epochs):  # paused here, then --resume=checkpoint
            saved = {"model": model.state_dict(), "optimizer": optimizer.state_dict()}
            model.load_state_dict(saved["model"])
            if fixed:  # the fix: the optimizer's state comes back too
                optimizer.load_state_dict(saved["optimizer"])
            else:  # a fresh optimizer: no momentum buffers, the initial rate
                optimizer.state.clear()
                for group in optimizer.param_groups:
                    group["lr"] = INITIAL_LR
        for inputs, target in monitor.batches(loader):
            optimizer.zero_grad()
            out = model(inputs)
            loss = loss_fn(out, target)
            loss.backward()
            optimizer.step()
            monitor.step(loss, out, target)
        scheduler.step()
        model.eval()
        monitor.log_eval(
            train_acc=kit.accuracy(model, X_tr, y_tr),
            val_acc=kit.accuracy(model, X_va, y_va),
            val_loss=kit.mean_loss(model, loss_fn, X_va, y_va),
        )
        model.train()
    return kit.finish(monitor, make_model=make_model, loss_fn=loss_fn, X=X_tr, y=y_tr)
