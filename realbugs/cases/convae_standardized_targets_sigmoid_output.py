"""An autoencoder ends in a sigmoid but reconstructs images standardized to mean 0:
it cannot output their negative half.

Issue 51 relabelled it from ``other_fault`` to ``softmax_before_loss``: the registry's
``softmax_before_loss.sigmoid_output`` variant is this bug (a regression's or
reconstruction's output ends in ``nn.Sigmoid``, and the targets leave (0, 1)), whatever
side the fix takes (here the merged one: targets back in [0, 1])."""

import torch
from torch import nn

from faultbench import Monitor
from faultbench.realbugs import Reference, Symptom, kit
from faultbench.realbugs.case import SourceCheck

SOURCE = "https://github.com/mikesj-public/convolutional_autoencoder/pull/9"
REPORTED = (
    "The notebook normalizes MNIST to its mean and standard deviation before training the "
    "autoencoder, which chops off the bottom half of the data: the network cannot "
    "reconstruct negative values."
)
DIAGNOSIS = (
    "The decoder's last layer is a sigmoid, whose outputs lie in (0, 1), while the "
    "standardized images the loss compares them with are mostly negative (the background); "
    "the merged fix drops the standardization and keeps the pixels in [0, 1] (a tanh output "
    "would be the other fix; the maintainer: 'the original version used tanh for that "
    "exact reason')."
)
# softmax_before_loss.sigmoid_output: "a regression's output ends in nn.Sigmoid: no prediction
# leaves (0, 1), the targets do" (faultbench/faults/models.py), for reconstruction too.
LABEL = "softmax_before_loss"
MODEL = "mlp"
OPTIMIZER = "Adam"
DATA = (
    "scikit-learn's digits (64 pixels in [0, 1]) stand in for MNIST; a small dense "
    "autoencoder (64-64-16-64-64, sigmoid output) for the notebook's convolutional one, "
    "trained by squared error with Adam. The faulty form standardizes "
    "the images as the notebook did; the fix keeps them in [0, 1]. R² is measured on the "
    "targets the loss compares with."
)
SYMPTOM = Symptom("final_val_acc", below=0.5)  # R²: the negative half is never reconstructed
SEED = 0
KIND = "reconstruction"
REFERENCE = Reference(
    0.844,
    "scikit-learn's PCA with a 16-number code, reconstructing the validation images: R² 0.844",
)
FIDELITY_DATA = "stand-in: digits for MNIST"
FIDELITY_MODEL = "stand-in: a small dense autoencoder for the notebook's convolutional one"
FIDELITY_CODE = "stand-in: a plain reconstruction loop with Adam"
REPORTED_EFFECT = "none given: the bottom half of the data is chopped off"
REENACTED_EFFECT = (
    "validation R² 0.027 on the standardized images, the loss at 0.62 of its start; the twin "
    "reconstructs with R² 0.815"
)
OBSERVED = True
SOURCE_CHECK = SourceCheck(
    read=(
        "the merged pull request (stored issues corpus): its description (standardizing chops off"
        " the bottom half, the network cannot reconstruct negative values; a tanh output the "
        "other fix) and the maintainer's reply (the original used tanh for that reason)."
    ),
    label=(
        "matches: relabelled in issue 51 from other_fault; a sigmoid output whose targets leave "
        "(0, 1) is the registry's softmax_before_loss.sigmoid_output, for regression and "
        "reconstruction."
    ),
    mechanism=(
        "matches: a sigmoid-ended autoencoder trained on standardized images; the fix is the "
        "merged one (images kept in [0, 1]), on a dense stand-in of the convolutional notebook."
    ),
)
TWIN_DEPARTURES: tuple[str, ...] = ()  # the forms differ on the bug's lines only
EPOCHS = 12
CODE = 16


class AutoEncoder(nn.Module):
    """An encoder to a 16-number code, a decoder back to the pixels, a sigmoid on top."""

    def __init__(self) -> None:
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, CODE))
        self.decoder = nn.Sequential(nn.Linear(CODE, 64), nn.ReLU(), nn.Linear(64, 64))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(self.decoder(self.encoder(x)))


def script(fixed: bool, *, epochs: int = EPOCHS) -> kit.CaseRun:
    """Reconstruct each batch; evaluate R² on the held-out images each epoch."""
    kit.seed_everything(SEED)
    X_train, _, X_val, _ = kit.digits(seed=SEED)
    if not fixed:  # the notebook's normalization to the training mean and deviation
        mean, std = X_train.mean(), X_train.std()
        X_train, X_val = (X_train - mean) / std, (X_val - mean) / std

    def make_model() -> nn.Module:
        torch.manual_seed(SEED)
        return AutoEncoder()

    model = make_model()
    loss_fn = nn.MSELoss()
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    loader = kit.batches_of(torch.utils.data.TensorDataset(X_train, X_train), 32)
    monitor = Monitor(model, optimizer, every=1, kind=KIND)
    for _epoch in range(epochs):
        for images, target in monitor.batches(loader):
            optimizer.zero_grad()
            reconstruction = model(images)
            loss = loss_fn(reconstruction, target)
            loss.backward()
            optimizer.step()
            monitor.step(loss, reconstruction, target)
        kit.log_scores(
            monitor,
            model,
            kind=KIND,
            train=(X_train, X_train),
            val=(X_val, X_val),
            val_loss=kit.mean_loss(model, loss_fn, X_val, X_val),
        )
    return kit.finish(monitor, make_model=make_model, loss_fn=loss_fn, X=X_train, y=X_train)
