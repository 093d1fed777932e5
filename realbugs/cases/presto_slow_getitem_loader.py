"""presto-worldcereal computes each sample's arrays in __getitem__, one process: seconds per
iteration."""

import numpy as np
import torch
from torch import nn

from faultbench import Monitor
from faultbench.realbugs import Reference, Symptom, kit
from faultbench.realbugs.case import AUDITED_BEFORE

SOURCE = "https://github.com/WorldCereal/presto-worldcereal/pull/9"
REPORTED = (
    "Training takes seconds per iteration: profiling shows the time goes to the dataset's "
    "__getitem__, and the GPU sits mostly idle."
)
DIAGNOSIS = (
    "The data pipeline is the bottleneck: every sample's input arrays are computed on the fly "
    "in __getitem__ in the main process; a faster __getitem__ with worker processes, and then "
    "a cache of the computed samples, made an epoch about 70 times faster."
)
LABEL = "starved_loader"
MODEL = "transformer"
OPTIMIZER = "AdamW"
DATA = (
    "Generated pixel time series (a year of daily reflectances in 6 bands, one seasonal shape "
    "per crop type, 5 types) stand in for the WorldCereal parquet rows; __getitem__ turns the "
    "daily series into 12 monthly medians, as Presto takes monthly inputs; a one-layer "
    "transformer encoder stands in for Presto. The fix is the pull request's cache: samples "
    "are computed once, before training."
)
SYMPTOM = Symptom("wait_share", above=0.5)  # most of each step waits for the batch
SEED = 0
KIND = "multiclass"
REFERENCE = Reference(
    1.0, "scikit-learn's LogisticRegression on the monthly medians (measured: 1.000)"
)
FIDELITY_DATA = "stand-in: generated daily reflectances for the WorldCereal rows"
FIDELITY_MODEL = "stand-in: a one-layer transformer encoder for Presto"
FIDELITY_CODE = "stand-in: a plain fine-tuning loop with AdamW"
REPORTED_EFFECT = (
    "seconds per iteration, the time in __getitem__; after the fix an epoch about 70 times faster"
)
REENACTED_EFFECT = "73% of each step spent waiting for the batch; the twin waits 2%"
OBSERVED = True
SOURCE_CHECK = AUDITED_BEFORE  # issue 40's audit; not read again in issue 51
TWIN_DEPARTURES: tuple[str, ...] = ()  # the forms differ on the bug's lines only
EPOCHS = 2
BANDS, MONTHS, TYPES = 6, 12, 5


class WorldCerealDataset(torch.utils.data.Dataset):
    """Raw daily series; each item is computed into monthly inputs when asked for (or once)."""

    def __init__(self, daily: np.ndarray, labels: np.ndarray, *, cache: bool) -> None:
        self.daily, self.labels = daily, labels
        self.cache = [self.compute(i) for i in range(len(labels))] if cache else None

    def compute(self, idx: int) -> tuple[torch.Tensor, torch.Tensor]:
        months = np.array_split(self.daily[idx], MONTHS)
        monthly = np.stack([np.median(month, axis=0) for month in months])
        monthly = (monthly - monthly.mean(0)) / (monthly.std(0) + 1e-6)
        return torch.from_numpy(monthly.astype(np.float32)), torch.tensor(self.labels[idx])

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, idx: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.cache[idx] if self.cache is not None else self.compute(idx)


class Encoder(nn.Module):
    """Band embedding, month position, one transformer encoder layer, mean pooling, a head."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Linear(BANDS, 32)
        self.position = nn.Parameter(torch.zeros(1, MONTHS, 32))
        self.encoder = nn.TransformerEncoder(
            nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True), num_layers=1
        )
        self.head = nn.Linear(32, TYPES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(self.embed(x) + self.position).mean(dim=1))


def crops(seed: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Daily reflectances: each crop type's seasonal curve per band, shifted, with noise."""
    rng = np.random.default_rng(seed)
    days = np.arange(365)
    peaks = rng.uniform(60, 300, size=(TYPES, BANDS))
    labels = rng.integers(0, TYPES, size=n)
    shift = rng.normal(0, 10, size=(n, 1, 1))
    curve = np.exp(
        -((days[None, :, None] - peaks[labels][:, None, :] - shift) ** 2) / (2 * 40.0**2)
    )
    daily = curve + rng.normal(0, 0.3, size=(n, 365, BANDS))
    return daily.astype(np.float32), labels.astype(np.int64)


def script(fixed: bool, *, epochs: int = EPOCHS) -> kit.CaseRun:
    """DataLoader(num_workers=0) over the dataset; validation on precomputed samples."""
    kit.seed_everything(SEED)
    daily, labels = crops(SEED, 700)
    train_ds = WorldCerealDataset(daily[:560], labels[:560], cache=fixed)
    val_ds = WorldCerealDataset(daily[560:], labels[560:], cache=True)
    val = [val_ds[i] for i in range(len(val_ds))]
    val_x, val_y = torch.stack([v[0] for v in val]), torch.stack([v[1] for v in val])
    probe_x = torch.stack([train_ds.compute(i)[0] for i in range(64)])

    def make_model() -> nn.Module:
        torch.manual_seed(SEED)
        return Encoder()

    model = make_model()
    criterion = nn.CrossEntropyLoss()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loader = torch.utils.data.DataLoader(train_ds, batch_size=32, shuffle=True, num_workers=0)
    monitor = Monitor(model, optimizer, every=1)
    for _epoch in range(epochs):
        model.train()
        for x, y in monitor.batches(loader):
            optimizer.zero_grad()
            preds = model(x)
            loss = criterion(preds, y)
            loss.backward()
            optimizer.step()
            monitor.step(loss, preds, y)
        model.eval()
        monitor.log_eval(
            train_acc=kit.accuracy(model, probe_x, torch.from_numpy(labels[:64])),
            val_acc=kit.accuracy(model, val_x, val_y),
            val_loss=kit.mean_loss(model, criterion, val_x, val_y),
        )
    return kit.finish(
        monitor,
        make_model=make_model,
        loss_fn=criterion,
        X=probe_x,
        y=torch.from_numpy(labels[:64]),
    )
