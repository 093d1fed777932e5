"""A raster autoencoder's reconstruction term calls binary_cross_entropy_with_logits with the
target and the prediction swapped: the loss falls without bound and nothing is reconstructed."""

import torch
import torch.nn.functional as F
from torch import nn

from faultbench import Monitor
from faultbench.realbugs import Reference, Symptom, kit
from faultbench.realbugs.case import SourceCheck

SOURCE = "https://github.com/autonomousvision/sledge/issues/4"
REPORTED = (
    "In the autoencoder's VAE objective, the arguments of binary_cross_entropy_with_logits "
    "look swapped (the target where the predicted logits belong and the other way round)."
)
DIAGNOSIS = (
    "The maintainers confirmed the bug, introduced while refactoring: the loss takes the "
    "raster as logits and the decoder's output as the target, which is linear in the output "
    "and unbounded below, so training drives logits up rather than towards the raster; the "
    "fix restores the order (prediction, target)."
)
LABEL = "other_fault"
MODEL = "mlp"
OPTIMIZER = "Adam"
DATA = (
    "scikit-learn's digits, thresholded at half intensity, stand in for the rasterized "
    "driving scenes (binary map channels); a small dense autoencoder (64-64-16-64-64, the "
    "logits out) for sledge's raster VAE, trained on the reconstruction term alone with "
    "Adam. R² compares sigmoid(logits) with the raster. No run is reported (read from the "
    "code): the symptom, a loss that falls below zero and a reconstruction no better than "
    "the mean raster, is the suite's choice."
)
SYMPTOM = Symptom("final_val_acc", below=0.3)  # R²: nothing is reconstructed
SEED = 0
KIND = "reconstruction"
REFERENCE = Reference(
    0.761,
    "scikit-learn's PCA with a 16-number code, reconstructing the validation rasters "
    "(clipped to [0, 1]): R² 0.761",
)
FIDELITY_DATA = "stand-in: thresholded digits for the rasterized driving scenes"
FIDELITY_MODEL = "stand-in: a small dense autoencoder for the raster VAE"
FIDELITY_CODE = "stand-in: a plain reconstruction loop with the objective's BCE term"
REPORTED_EFFECT = "none given: the arguments are swapped (read from the code)"
REENACTED_EFFECT = (
    "the loss falls from -54.99 to -32074435 and R² is -3.7; the twin reconstructs with R² 0.779"
)
OBSERVED = False
SOURCE_CHECK = SourceCheck(
    read=(
        "the issue (stored issues corpus): the arguments of binary_cross_entropy_with_logits in "
        "the VAE objective may need swapping; the maintainer: right, introduced while "
        "refactoring, to be fixed."
    ),
    label=(
        "matches: a loss whose prediction and target are swapped is none of the known faults: "
        "other_fault."
    ),
    mechanism=(
        "matches: the raster passed as logits and the output as target, the twin in the right "
        "order, on a small dense autoencoder."
    ),
)
TWIN_DEPARTURES: tuple[str, ...] = ()  # the forms differ on the bug's lines only
EPOCHS = 12
CODE = 16


def reconstruction_loss(logits: torch.Tensor, raster: torch.Tensor, *, swapped: bool):
    """The objective's term, as refactored (swapped) or as fixed."""
    if swapped:
        return F.binary_cross_entropy_with_logits(raster, logits)
    return F.binary_cross_entropy_with_logits(logits, raster)


def script(fixed: bool, *, epochs: int = EPOCHS) -> kit.CaseRun:
    """Reconstruct each batch of rasters; evaluate R² on the held-out ones."""
    kit.seed_everything(SEED)
    X_train, _, X_val, _ = kit.digits(seed=SEED)
    X_train, X_val = (X_train > 0.5).float(), (X_val > 0.5).float()

    def make_model() -> nn.Module:
        torch.manual_seed(SEED)
        return nn.Sequential(
            nn.Linear(64, 64),
            nn.ReLU(),
            nn.Linear(64, CODE),
            nn.Linear(CODE, 64),
            nn.ReLU(),
            nn.Linear(64, 64),
        )

    def loss_fn(logits: torch.Tensor, raster: torch.Tensor) -> torch.Tensor:
        return reconstruction_loss(logits, raster, swapped=not fixed)

    model = make_model()
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    loader = kit.batches_of(torch.utils.data.TensorDataset(X_train, X_train), 32)

    @torch.no_grad()
    def r2(x: torch.Tensor) -> float:
        predicted = torch.sigmoid(model(x))
        return 1.0 - float(((x - predicted) ** 2).sum() / ((x - x.mean(0)) ** 2).sum())

    monitor = Monitor(model, optimizer, every=1, kind=KIND)
    for _epoch in range(epochs):
        for raster, target in monitor.batches(loader):
            optimizer.zero_grad()
            logits = model(raster)
            loss = loss_fn(logits, target)
            loss.backward()
            optimizer.step()
            monitor.step(loss)
        monitor.log_eval(
            train_r2=r2(X_train),
            val_r2=r2(X_val),
            val_loss=kit.mean_loss(model, loss_fn, X_val, X_val),
        )
    return kit.finish(monitor, make_model=make_model, loss_fn=loss_fn, X=X_train, y=X_train)
