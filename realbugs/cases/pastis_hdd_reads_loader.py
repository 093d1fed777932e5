"""PSE-TAE on the PASTIS pixel sets read from disk every time: GPU utilisation below 1%."""

import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from torch import nn

from faultbench import Monitor
from faultbench.realbugs import Reference, Symptom, kit
from faultbench.realbugs.case import AUDITED_BEFORE

SOURCE = "https://github.com/VSainteuf/pastis-benchmark/issues/13"
REPORTED = "Training PSE-TAE on the pixel-set dataset, GPU utilisation is tiny (below 1%)."
DIAGNOSIS = (
    "The GPU is idle most of the time because loading the data is the bottleneck (samples "
    "read from a hard disk); the maintainer pointed to the dataset's cache=True option, "
    "which keeps the samples in RAM after the first read."
)
LABEL = "starved_loader"
MODEL = "mlp"
OPTIMIZER = "Adam"
DATA = (
    "Generated parcels (sets of 16 pixels x 10 dates x 4 bands, 5 crop classes) written to a "
    "temporary folder as one .npy file each; a 1 ms pause per read stands in for the hard "
    "disk's seek. A pixel-set encoder (shared MLP, mean pooling) and a temporal MLP stand in "
    "for PSE-TAE. The fix is the dataset's cache: each file is read once, before training."
)
SYMPTOM = Symptom("wait_share", above=0.5)  # most of each step waits for the batch
SEED = 0
KIND = "multiclass"
REFERENCE = Reference(
    1.0, "scikit-learn's LogisticRegression on the flattened parcels (measured: 1.000)"
)
FIDELITY_DATA = (
    "stand-in: generated pixel sets, one .npy file each, with a 1 ms pause per read for the "
    "hard disk"
)
FIDELITY_MODEL = "stand-in: a pixel-set MLP and a temporal MLP for PSE-TAE"
FIDELITY_CODE = "stand-in: a plain loop with Adam"
REPORTED_EFFECT = "GPU utilisation below 1%"
REENACTED_EFFECT = "91% of each step spent waiting for the batch; the twin waits 21%"
OBSERVED = True
SOURCE_CHECK = AUDITED_BEFORE  # issue 40's audit; not read again in issue 51
TWIN_DEPARTURES: tuple[str, ...] = ()  # the forms differ on the bug's lines only
EPOCHS = 2
PIXELS, DATES, BANDS, CLASSES = 16, 10, 4, 5
SEEK_SECONDS = 0.001  # a hard disk's seek, per file


class PixelSetData(torch.utils.data.Dataset):
    """One file per parcel, read on every access (or once, with cache=True)."""

    def __init__(self, folder: Path, labels: np.ndarray, *, cache: bool) -> None:
        self.folder, self.labels = folder, labels
        self.memory = {i: self.read(i) for i in range(len(labels))} if cache else None

    def read(self, item: int) -> torch.Tensor:
        time.sleep(SEEK_SECONDS)
        return torch.from_numpy(np.load(self.folder / f"{item}.npy"))

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, item: int) -> tuple[torch.Tensor, torch.Tensor]:
        x = self.memory[item] if self.memory is not None else self.read(item)
        return x, torch.tensor(self.labels[item])


class PseTae(nn.Module):
    """Per-pixel MLP, mean over the set, then an MLP over the dates."""

    def __init__(self) -> None:
        super().__init__()
        self.pse = nn.Sequential(nn.Linear(BANDS, 32), nn.ReLU(), nn.Linear(32, 16))
        self.tae = nn.Sequential(nn.Linear(DATES * 16, 64), nn.ReLU(), nn.Linear(64, CLASSES))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.tae(self.pse(x).mean(dim=1).flatten(1))


def parcels(seed: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Pixel sets whose band values follow a per-class temporal profile, with noise."""
    rng = np.random.default_rng(seed)
    profiles = rng.normal(0, 1, size=(CLASSES, DATES, BANDS))
    labels = rng.integers(0, CLASSES, size=n)
    x = profiles[labels][:, None] + rng.normal(0, 1.0, size=(n, PIXELS, DATES, BANDS))
    return x.astype(np.float32), labels.astype(np.int64)


def script(fixed: bool, *, epochs: int = EPOCHS) -> kit.CaseRun:
    """Write the parcels, then train from the files."""
    kit.seed_everything(SEED)
    x, labels = parcels(SEED, 600)
    with tempfile.TemporaryDirectory(prefix="pastis-") as tmp:
        folder = Path(tmp)
        for i, sample in enumerate(x):
            np.save(folder / f"{i}.npy", sample)
        dataset = PixelSetData(folder, labels[:480], cache=fixed)
        val_x, val_y = torch.from_numpy(x[480:]), torch.from_numpy(labels[480:])

        def make_model() -> nn.Module:
            torch.manual_seed(SEED)
            return PseTae()

        model = make_model()
        criterion = nn.CrossEntropyLoss()
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
        loader = torch.utils.data.DataLoader(dataset, batch_size=32, shuffle=True)
        monitor = Monitor(model, optimizer, every=1)
        for _epoch in range(epochs):
            for xb, yb in monitor.batches(loader):
                optimizer.zero_grad()
                out = model(xb)
                loss = criterion(out, yb)
                loss.backward()
                optimizer.step()
                monitor.step(loss, out, yb)
            monitor.log_eval(
                train_acc=kit.accuracy(
                    model, torch.from_numpy(x[:480]), torch.from_numpy(labels[:480])
                ),
                val_acc=kit.accuracy(model, val_x, val_y),
                val_loss=kit.mean_loss(model, criterion, val_x, val_y),
            )
    X_probe, y_probe = torch.from_numpy(x[:480]), torch.from_numpy(labels[:480])
    return kit.finish(monitor, make_model=make_model, loss_fn=criterion, X=X_probe, y=y_probe)
