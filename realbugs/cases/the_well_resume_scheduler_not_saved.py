"""The Well's trainer saved the optimizer but not the scheduler: a resumed run warmed up and
decayed its rate all over again."""

import math

import numpy as np
import torch
from torch import nn

from faultbench import Monitor
from faultbench.realbugs import Reference, Symptom, kit
from faultbench.realbugs.case import SourceCheck
from faultbench.tasks.kinds import get_kind

SOURCE = "https://github.com/PolymathicAI/the_well/pull/63"
REPORTED = (
    "Resuming a run from a checkpoint restarted the learning-rate scheduler's warmup and "
    "cosine decay (found in the trainer's code)."
)
DIAGNOSIS = (
    "The trainer's save_model and load_checkpoint saved and loaded the optimizer's state but "
    "not lr_scheduler.state_dict(), so the resumed scheduler started from its first step. The "
    "pull request saves and loads the scheduler's state too (it was closed in a "
    "reorganization of the repository, the maintainers asking for it again)."
)
LABEL = "resume_without_state"
MODEL = "mlp"
OPTIMIZER = "AdamW"
DATA = (
    "Generated 1-D diffusion snapshots (a field of 32 points, its next step under the heat "
    "equation) stand in for The Well's physics datasets, an MLP for its surrogate models; "
    "AdamW with warmup then cosine over 200 updates, interrupted after 150 and resumed with "
    "the optimizer's state. The report found the bug in the code: the symptom is the suite's "
    "choice, the loss climbing back after the resume."
)
SYMPTOM = Symptom("loss_rebound", above=1.5)  # the loss climbs back after the resume
SEED = 0
KIND = "regression"  # what the task predicts (the Monitor's kind)
REFERENCE = Reference(
    1.0,
    (
        "least squares (numpy.linalg.lstsq) from one snapshot to the next, the heat step "
        "being linear: R² 1.000"
    ),
)
EPOCHS = 8
FIDELITY_DATA = "stand-in: generated 1-D heat-equation snapshots"
FIDELITY_MODEL = "stand-in: an MLP for The Well's surrogate models"
FIDELITY_CODE = "stand-in: our loop; the checkpoint holds the model and optimizer only"
REPORTED_EFFECT = "none given: the schedule restarts (read in the code)"
REENACTED_EFFECT = "last tenth's loss 2.3 times its lowest (twin 1.09); R² 0.997 in both"
OBSERVED = False
SOURCE_CHECK = SourceCheck(
    read=(
        "the pull request (stored issues corpus): the trainer saved and loaded the optimizer's "
        "state but not lr_scheduler.state_dict(), so a resumed run restarted warmup and cosine "
        "decay; closed in a restructuring, the maintainers asking for it again."
    ),
    label="matches: resuming without the schedule's state is resume_without_state.",
    mechanism=(
        "matches: the scheduler rebuilt from its first step on resume, the twin given its saved "
        "state."
    ),
)
TWIN_DEPARTURES: tuple[str, ...] = ()  # the forms differ on the bug's lines only
POINTS, WARMUP, RESUME_AT = 32, 10, 150


def snapshots(seed: int, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Smooth random fields and their next step of explicit diffusion (periodic)."""
    rng = np.random.default_rng(seed)
    x = np.linspace(0, 2 * np.pi, POINTS, endpoint=False)
    modes = rng.normal(size=(n, 4, 2)) / np.arange(1, 5)[None, :, None]
    u = sum(
        modes[:, k, 0, None] * np.sin((k + 1) * x) + modes[:, k, 1, None] * np.cos((k + 1) * x)
        for k in range(4)
    )
    laplacian = np.roll(u, 1, axis=1) - 2 * u + np.roll(u, -1, axis=1)
    return torch.tensor(u, dtype=torch.float32), torch.tensor(
        u + 0.2 * laplacian, dtype=torch.float32
    )


def warmup_cosine(
    optimizer: torch.optim.Optimizer, total: int
) -> torch.optim.lr_scheduler.LambdaLR:
    def factor(step: int) -> float:
        return (
            min(1.0, (step + 1) / WARMUP)
            * 0.5
            * (1.0 + math.cos(math.pi * min(step, total) / max(total, 1)))  # total 0: the probe
        )

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


@torch.no_grad()
def r2(model: nn.Module, X: torch.Tensor, y: torch.Tensor) -> float:
    """R² of the model's predictions (the regression kind's score)."""
    return get_kind("regression").evaluate(model(X).numpy(), y.numpy())["r2"]


def script(fixed: bool, *, epochs: int = EPOCHS) -> kit.CaseRun:
    """MSE, AdamW with warmup and cosine; a checkpoint at RESUME_AT and a resumed run."""
    kit.seed_everything(SEED)
    X, y = snapshots(SEED, 1000)
    X_tr, y_tr, X_va, y_va = X[:800], y[:800], X[800:], y[800:]

    def make_model() -> nn.Module:
        torch.manual_seed(SEED)
        return nn.Sequential(nn.Linear(POINTS, 128), nn.GELU(), nn.Linear(128, POINTS))

    model = make_model()
    loss_fn = nn.MSELoss()
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-2)
    total = epochs * (800 // 32)
    scheduler = warmup_cosine(optimizer, total)
    loader = kit.batches_of(torch.utils.data.TensorDataset(X_tr, y_tr), 32)
    monitor = Monitor(model, optimizer, every=1, kind=KIND)
    step = 0
    for _epoch in range(epochs):
        for inputs, target in monitor.batches(loader):
            if step == RESUME_AT:  # save_model, then load_checkpoint in a new run
                saved = {
                    "model": model.state_dict(),
                    "optimizer": optimizer.state_dict(),
                    "scheduler": scheduler.state_dict(),
                }
                model.load_state_dict(saved["model"])
                optimizer.load_state_dict(saved["optimizer"])
                scheduler = warmup_cosine(optimizer, total)  # a new scheduler from step 0...
                if fixed:  # ...given the saved state, as the pull request does
                    scheduler.load_state_dict(saved["scheduler"])
            optimizer.zero_grad()
            out = model(inputs)
            loss = loss_fn(out, target)
            loss.backward()
            optimizer.step()
            scheduler.step()
            monitor.step(loss, out, target)
            step += 1
        monitor.log_eval(
            train_r2=r2(model, X_tr[:200], y_tr[:200]),
            val_r2=r2(model, X_va, y_va),
            val_loss=kit.mean_loss(model, loss_fn, X_va, y_va),
        )
    return kit.finish(monitor, make_model=make_model, loss_fn=loss_fn, X=X_tr, y=y_tr)
