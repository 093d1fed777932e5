"""A keypoint-heatmap trainer steps Adam without ever zeroing the gradients: the loss climbs
back instead of settling."""

import numpy as np
import torch
from torch import nn

from faultbench import Monitor
from faultbench.realbugs import Reference, Symptom, kit
from faultbench.realbugs.case import SourceCheck

SOURCE = "https://github.com/yastrebksv/TennisCourtDetector/issues/7"
REPORTED = (
    "base_trainer.py's training loop has no optimizer.zero_grad(): 'there must be smt wrong'."
)
DIAGNOSIS = (
    "Without zero_grad every backward pass adds its gradient to all the previous ones, so "
    "each Adam step follows the sum of the run's gradients rather than the batch's; the "
    "maintainer agreed ('You are right') and added the call."
)
LABEL = "missing_zero_grad"
MODEL = "cnn"
OPTIMIZER = "Adam"
DATA = (
    "Generated 16x16 frames, each with one bright keypoint on noise, and its Gaussian heatmap "
    "as the target, stand in for the court images and their 15 keypoint heatmaps; a small "
    "fully convolutional network for TrackNet. The repository's loss (MSE on the heatmaps) "
    "and optimizer (Adam, betas 0.9 and 0.999), at 1e-3 and batches of 8 rather than its "
    "1e-5 and 2, so that the run fits in seconds. R² compares the predicted heatmaps with "
    "the targets. No failure was reported (read from the code): the symptom, a loss that "
    "ends above where it started, is the suite's choice."
)
SYMPTOM = Symptom("loss_ratio", above=1.0)  # the loss ends above where it started
SEED = 0
KIND = "regression"
REFERENCE = Reference(
    0.892,
    "template matching: the heatmap drawn at the peak of the frame smoothed by scipy's "
    "gaussian_filter (sigma 1), scored on the validation frames: R² 0.892",
)
FIDELITY_DATA = "stand-in: generated frames with one keypoint for the court images"
FIDELITY_MODEL = "stand-in: a small fully convolutional network for TrackNet"
FIDELITY_CODE = "stand-in: the repository's loss and Adam, at a larger rate and batch"
REPORTED_EFFECT = "none given: the missing call was noticed in the code"
REENACTED_EFFECT = (
    "the loss ends at 1.08 of its start and R² is -0.09; the twin's loss ends at 0.24 of its "
    "start, R² 0.853"
)
OBSERVED = False
SOURCE_CHECK = SourceCheck(
    read=(
        "the issue (stored issues corpus): no optimizer.zero_grad() in base_trainer.py; the "
        "maintainer: right, fixed."
    ),
    label="matches: gradients never cleared is missing_zero_grad.",
    mechanism=(
        "matches: the trainer's loop without zero_grad, the twin with it, on a stand-in CNN."
    ),
)
TWIN_DEPARTURES: tuple[str, ...] = ()  # the forms differ on the bug's lines only
EPOCHS = 3
SIDE, FRAMES = 16, 1200


def frames(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Noisy frames with one Gaussian keypoint each, and the keypoint's heatmap."""
    rng = np.random.default_rng(seed)
    spot = rng.integers(1, SIDE - 1, size=(FRAMES, 2))
    yy, xx = np.mgrid[0:SIDE, 0:SIDE]
    heat = np.exp(-((yy - spot[:, :1, None]) ** 2 + (xx - spot[:, 1:, None]) ** 2) / 2.0)
    image = heat + rng.normal(0, 0.3, size=(FRAMES, SIDE, SIDE))
    as_tensor = lambda a: torch.from_numpy(a.astype(np.float32)).unsqueeze(1)  # noqa: E731
    return as_tensor(image), as_tensor(heat)


def script(fixed: bool, *, epochs: int = EPOCHS) -> kit.CaseRun:
    """base_trainer.train: forward, MSE, backward, step (zero_grad only in the fix)."""
    kit.seed_everything(SEED)
    images, heatmaps = frames(SEED)
    train_x, train_y, val_x, val_y = images[:1000], heatmaps[:1000], images[1000:], heatmaps[1000:]

    def make_model() -> nn.Module:
        torch.manual_seed(SEED)
        return nn.Sequential(
            nn.Conv2d(1, 16, 3, padding=1),
            nn.ReLU(),
            nn.Conv2d(16, 16, 3, padding=1),
            nn.ReLU(),
            nn.Conv2d(16, 1, 3, padding=1),
        )

    model = make_model()
    criterion = nn.MSELoss()
    optimizer = torch.optim.Adam(model.parameters(), 1e-3, betas=(0.9, 0.999), weight_decay=0)
    loader = kit.batches_of(torch.utils.data.TensorDataset(train_x, train_y), 8)
    monitor = Monitor(model, optimizer, every=1, kind=KIND)
    for _epoch in range(epochs):
        model.train()
        for batch_x, batch_y in monitor.batches(loader):
            if fixed:
                optimizer.zero_grad()
            out = model(batch_x)
            loss = criterion(out, batch_y)
            loss.backward()
            optimizer.step()
            monitor.step(loss, out, batch_y)
        model.eval()
        kit.log_scores(
            monitor,
            model,
            kind=KIND,
            train=(train_x[:200], train_y[:200]),
            val=(val_x, val_y),
            val_loss=kit.mean_loss(model, criterion, val_x, val_y),
        )
    return kit.finish(monitor, make_model=make_model, loss_fn=criterion, X=train_x, y=train_y)
