"""DiM's training resumed the weights and the optimizer but not the rate schedule: the rate
started again from its initial state."""

import math

import torch
from torch import nn

from faultbench import Monitor
from faultbench.realbugs import Reference, Symptom, kit
from faultbench.realbugs.case import SourceCheck
from faultbench.tasks.kinds import get_kind

SOURCE = "https://github.com/tyshiwo1/DiM-DiffusionMamba/issues/5"
REPORTED = (
    "After an unexpected interruption, relaunching the training command resumed from "
    "125000.ckpt, but the learning rate started again from its initial state (the reporter's "
    "learning-rate plots)."
)
DIAGNOSIS = (
    "The maintainer confirmed that the model weights and the optimizer's statistics were "
    "resumed but the learning-rate scheduler was not, and changed the code to resume the "
    "schedulers too."
)
LABEL = "resume_without_state"
MODEL = "mlp"
OPTIMIZER = "AdamW"
DATA = (
    "A denoising model on scikit-learn's 8x8 digits stands in for DiM's latent diffusion on "
    "images: an MLP predicts the noise added at a random level (the diffusion objective), "
    "AdamW with warmup then cosine over 240 updates, interrupted after 180 and resumed with "
    "the weights and the optimizer's state. The symptom is the suite's choice (the report "
    "shows the rate): the loss climbing back after the resume."
)
SYMPTOM = Symptom("loss_rebound", above=1.3)  # the loss climbs back after the resume
SEED = 0
KIND = "regression"  # what the task predicts (the Monitor's kind)
REFERENCE = Reference(
    0.75,
    (
        "scikit-learn's Ridge from the noised image and its level to the noise, fitted on 20 "
        "noisings of the training digits: R² 0.750"
    ),
)
EPOCHS = 10
FIDELITY_DATA = "stand-in: scikit-learn's 8x8 digits for DiM's image latents"
FIDELITY_MODEL = "stand-in: an MLP noise predictor for the Mamba diffusion model"
FIDELITY_CODE = "stand-in: our loop; the resume restores the weights and optimizer only"
REPORTED_EFFECT = "none given: the rate restarts from its initial state (plots; no loss given)"
REENACTED_EFFECT = "last tenth's loss 1.6 times its lowest, R² 0.50; the twin 1.02 and 0.70"
OBSERVED = True
SOURCE_CHECK = SourceCheck(
    read=(
        "the issue thread (stored issues corpus): the report (resumed from 125000.ckpt, the rate "
        "started from its initial state) and the maintainer's replies (weights and optimizer "
        "statistics resumed, the schedulers now resumed too)."
    ),
    label=(
        "matches: resuming without the schedule's state is the registry's resume_without_state."
    ),
    mechanism=(
        "matches: weights and optimizer restored, the scheduler not; the twin restores it as the "
        "maintainer's change does, on stand-in data and model."
    ),
)
TWIN_DEPARTURES: tuple[str, ...] = ()  # the forms differ on the bug's lines only
WARMUP, RESUME_AT = 10, 180


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


class Denoiser(nn.Module):
    """Predicts the noise in a noised image given its noise level (the last input column)."""

    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(65, 128), nn.SiLU(), nn.Linear(128, 128), nn.SiLU(), nn.Linear(128, 64)
        )

    def forward(self, noised_and_level: torch.Tensor) -> torch.Tensor:
        return self.net(noised_and_level)


@torch.no_grad()
def r2(model: nn.Module, X: torch.Tensor, y: torch.Tensor) -> float:
    """R² of the model's predictions (the regression kind's score)."""
    return get_kind("regression").evaluate(model(X).numpy(), y.numpy())["r2"]


def script(fixed: bool, *, epochs: int = EPOCHS) -> kit.CaseRun:
    """Noise-prediction MSE, AdamW with warmup and cosine, resumed at RESUME_AT."""
    kit.seed_everything(SEED)
    X_tr, _, X_va, _ = kit.digits(seed=SEED)
    generator = torch.Generator().manual_seed(SEED)

    def noised(images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        level = torch.rand(len(images), 1, generator=generator)
        noise = torch.randn(images.shape, generator=generator)
        mixed = torch.sqrt(1 - level) * (2 * images - 1) + torch.sqrt(level) * noise
        return torch.cat([mixed, level], 1), noise

    val_in, val_noise = noised(X_va)
    seen_in, seen_noise = noised(X_tr[:200])

    def make_model() -> nn.Module:
        torch.manual_seed(SEED)
        return Denoiser()

    model = make_model()
    loss_fn = nn.MSELoss()
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-2)
    total = epochs * (len(X_tr) // 64 + 1)
    scheduler = warmup_cosine(optimizer, total)
    loader = kit.batches_of(torch.utils.data.TensorDataset(X_tr), 64)
    monitor = Monitor(model, optimizer, every=1, kind=KIND)
    step = 0
    for _epoch in range(epochs):
        for (images,) in monitor.batches(loader):
            if step == RESUME_AT:  # the interrupted job is relaunched from the checkpoint
                saved = {
                    "model": model.state_dict(),
                    "optimizer": optimizer.state_dict(),
                    "scheduler": scheduler.state_dict(),
                }
                model.load_state_dict(saved["model"])
                optimizer.load_state_dict(saved["optimizer"])
                scheduler = warmup_cosine(optimizer, total)
                if fixed:  # the maintainer's fix: the scheduler is resumed too
                    scheduler.load_state_dict(saved["scheduler"])
            inputs, noise = noised(images)
            optimizer.zero_grad()
            out = model(inputs)
            loss = loss_fn(out, noise)
            loss.backward()
            optimizer.step()
            scheduler.step()
            monitor.step(loss, out, noise)
            step += 1
        monitor.log_eval(
            train_r2=r2(model, seen_in, seen_noise),
            val_r2=r2(model, val_in, val_noise),
            val_loss=kit.mean_loss(model, loss_fn, val_in, val_noise),
        )
    probe_in, probe_noise = noised(X_tr)
    return kit.finish(monitor, make_model=make_model, loss_fn=loss_fn, X=probe_in, y=probe_noise)
