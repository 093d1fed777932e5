"""The few helpers every case script shares: seeds, bundled data, evaluation, the finish.

Everything a bug lives in (the model, the loss, the loop, the loader, the data's
preparation) stays in the case's own file; what is here is what every reporter's
script does the same way: seed, load a bundled scikit-learn dataset, measure an
accuracy, and hand the Monitor's trace and a probe back to the benchmark.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sized
from typing import cast

import numpy as np
import torch
from torch import nn

from faultbench.realbugs.case import CaseRun, Reference
from faultbench.scoring.run import Probe
from faultbench.training.monitor import Monitor

__all__ = [
    "DIGITS_REFERENCE",
    "CaseRun",
    "accuracy",
    "batches_of",
    "blobs",
    "digits",
    "digits_arrays",
    "finish",
    "log_scores",
    "mean_loss",
    "scores",
    "seed_everything",
    "split",
]

VAL_FRACTION = 0.2  # the share of a bundled dataset held out for validation
PROBE_EXAMPLES = 256  # training examples handed to the probe (a memorization check needs 16)
#: The healthy bar of a fixed twin that trains on :func:`digits` (seed 0) and validates on its
#: split: what scikit-learn's LogisticRegression scores there (tests/test_realbugs_case.py
#: measures it again).
DIGITS_REFERENCE = Reference(
    0.981, "scikit-learn's LogisticRegression (max_iter=5000) on the same digits split: 0.981"
)


def seed_everything(seed: int) -> None:
    """Seed Python's, NumPy's and torch's generators (the scripts run on one thread)."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def split(
    X: np.ndarray, y: np.ndarray, *, seed: int, val_fraction: float = VAL_FRACTION
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """A seeded shuffle, then the first part for training and the rest for validation."""
    order = np.random.default_rng(seed).permutation(len(y))
    cut = round(len(y) * (1.0 - val_fraction))
    return X[order[:cut]], y[order[:cut]], X[order[cut:]], y[order[cut:]]


def digits_arrays() -> tuple[np.ndarray, np.ndarray]:
    """scikit-learn's bundled 8x8 digits: raw pixels 0..16 (float32), labels 0..9."""
    from sklearn.datasets import load_digits

    data = load_digits()
    return data.data.astype(np.float32), data.target.astype(np.int64)


def digits(
    *, seed: int, images: bool = False
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Digits scaled to [0, 1], split; as (N, 64) rows or (N, 1, 8, 8) images."""
    X, y = digits_arrays()
    X = X / 16.0
    if images:
        X = X.reshape(-1, 1, 8, 8)
    X_tr, y_tr, X_va, y_va = split(X, y, seed=seed)
    return (
        torch.from_numpy(X_tr),
        torch.from_numpy(y_tr),
        torch.from_numpy(X_va),
        torch.from_numpy(y_va),
    )


def blobs(
    *, seed: int, classes: int, features: int, samples: int = 2000, separation: float = 1.0
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Overlapping Gaussian classes (scikit-learn's make_classification), standardized, split.

    Unlike the bundled digits they are not linearly separable, as most real data is not.
    """
    from sklearn.datasets import make_classification

    X, y = make_classification(
        n_samples=samples,
        n_features=features,
        n_informative=min(features, 10),
        n_redundant=0,
        n_classes=classes,
        n_clusters_per_class=1,
        class_sep=separation,
        random_state=seed,
    )
    X = ((X - X.mean(0)) / X.std(0)).astype(np.float32)
    X_tr, y_tr, X_va, y_va = split(X, y.astype(np.int64), seed=seed)
    return (
        torch.from_numpy(X_tr),
        torch.from_numpy(y_tr),
        torch.from_numpy(X_va),
        torch.from_numpy(y_va),
    )


def batches_of(dataset: torch.utils.data.Dataset, batch_size: int) -> torch.utils.data.DataLoader:
    """A DataLoader that takes whole shuffled batches at once (``dataset[list_of_indices]``).

    For the cases whose tiny model would otherwise spend most of its step waiting for
    the per-item DataLoader to collate: their reporters' data did not fit in a tensor.
    """
    return torch.utils.data.DataLoader(
        dataset,
        sampler=torch.utils.data.BatchSampler(
            torch.utils.data.RandomSampler(cast(Sized, dataset)),
            batch_size=batch_size,
            drop_last=False,
        ),
        batch_size=None,
    )


@torch.no_grad()
def accuracy(model: nn.Module, X: torch.Tensor, y: torch.Tensor) -> float:
    """Share of ``X`` whose highest score is ``y`` (the model's mode is left as it is)."""
    return float((model(X).argmax(-1) == y).float().mean())


@torch.no_grad()
def scores(
    model: nn.Module, X: torch.Tensor | tuple[torch.Tensor, ...], y: torch.Tensor, *, kind: str
) -> dict[str, float]:
    """Every metric of the task ``kind`` (faultbench.tasks.kinds) on ``X``: the R² and MAE of
    a regression, the F1 of a multi-label task... (a tuple ``X`` is a multi-input model's)."""
    from faultbench.tasks.kinds import get_kind

    output = model(*X) if isinstance(X, tuple) else model(X)
    return get_kind(kind).evaluate(output.numpy(), y.numpy())


def log_scores(
    monitor: Monitor,
    model: nn.Module,
    *,
    kind: str,
    train: tuple[torch.Tensor, torch.Tensor],
    val: tuple[torch.Tensor, torch.Tensor] | None = None,
    **also: float,
) -> None:
    """Log every metric of ``kind`` on the training data and on the validation data
    (``train_r2=..., val_r2=..., val_mae=...``), and the named values ``also`` (a
    ``val_loss``); a source with no held-out data is measured on its own rows (``val``
    omitted)."""
    held_out = train if val is None else val
    logged = {f"train_{k}": v for k, v in scores(model, *train, kind=kind).items()}
    logged |= {f"val_{k}": v for k, v in scores(model, *held_out, kind=kind).items()}
    monitor.log_eval(step=None, **logged, **also)


@torch.no_grad()
def mean_loss(
    model: nn.Module,
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    X: torch.Tensor | tuple[torch.Tensor, ...],
    y: torch.Tensor,
) -> float:
    """The loss on ``X`` in one pass (a tuple ``X`` is a multi-input model's)."""
    return float(loss_fn(model(*X) if isinstance(X, tuple) else model(X), y))


def finish(
    monitor: Monitor,
    *,
    make_model: Callable[[], nn.Module],
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    X: torch.Tensor | tuple[torch.Tensor, ...],
    y: torch.Tensor,
) -> CaseRun:
    """Close the monitor and return the trace, the configuration and a probe.

    Args:
        monitor: The script's monitor (every step recorded).
        make_model: Builds the model exactly as the script did before training.
        loss_fn: The loss the script trained with (the bug included, if it is there).
        X: Training inputs exactly as the loop fed them (the bug included); a tuple for a
            model of several inputs (``model(*X)``).
        y: Their targets, as the loop fed them.
    """
    trace, config = monitor.trace(), monitor.config()
    monitor.close()
    first = tuple(t[:PROBE_EXAMPLES] for t in X) if isinstance(X, tuple) else X[:PROBE_EXAMPLES]
    probe = Probe.from_user(make_model, loss_fn, first, y[:PROBE_EXAMPLES])
    return CaseRun(trace, config, probe)
