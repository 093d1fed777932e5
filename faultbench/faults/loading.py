"""The known fault of the loader: a pipeline the training step waits for.

Each variant says in one line what the bug is, in a user's terms, and which part
of the recipe it lives in; :mod:`faultbench.faults.known` registers them under
their fault.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from faultbench.faults.fault import Severity, Variant
from faultbench.faults.recipe import Batch, Recipe

CALIBRATION_STEPS = 20  # steps a starved loader times before it starts to starve the loop
# The knob's range ends at the canonical 5x a step: the signal is the share of
# each step spent waiting, m / (1 + m), 0.83 at 5x, and beyond it the share
# barely moves (0.98 at 50x) while every multiple adds a step's worth of waiting
# to each run. A sweep to 50x made the starved loader two thirds of a cold
# `make report`'s training; "severe" is where the sweep ends, so 5x is severe.
MOST_WAITING, LEAST_WAITING = 5.0, 0.2


# -- starved_loader ------------------------------------------------------------


def _paced(
    batches: Iterator[Batch], multiple: float, wait: Callable[[float], None]
) -> Iterator[Batch]:
    """Yield from ``batches``; before fetching each, ``wait(multiple x compute per step)``.

    The compute per step is measured, not assumed: the median time the loop
    spent between receiving a batch and asking for the next one, over its
    first ``CALIBRATION_STEPS`` steps (which are not starved). So a severity
    means the same share of waiting on a fast machine and on a slow one.
    """
    gaps: list[float] = []
    per_step = 0.0
    handed: float | None = None
    while True:
        if handed is not None and len(gaps) < CALIBRATION_STEPS:
            gaps.append(time.perf_counter() - handed)
            if len(gaps) == CALIBRATION_STEPS:
                per_step = statistics.median(gaps)
        wait(multiple * per_step)
        batch = next(batches)
        handed = time.perf_counter()
        yield batch


def _sleep(seconds: float) -> None:
    if seconds > 0:
        time.sleep(seconds)


def _pause(recipe: Recipe, severity: float | None) -> Recipe:
    inner, multiple = recipe.loader, float(severity or 0.0)

    def paused(r: Recipe) -> Iterator[Batch]:
        return _paced(inner(r), multiple, _sleep)

    return recipe.replace(loader=paused)


class _SlowItems(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """The training examples one at a time, each after ``work`` seconds of CPU work
    (what decoding or augmenting an item costs).

    Each item works until its own deadline, ``work`` after the last item's, counted
    from the start of the batch: a busy machine that preempts one item's work then
    shortens the next ones', so a batch costs its work, not its work plus every
    preemption.
    """

    def __init__(self, X: np.ndarray, y: np.ndarray) -> None:
        self.X = torch.from_numpy(np.ascontiguousarray(X))
        self.y = torch.from_numpy(np.ascontiguousarray(y))
        self.work = 0.0  # seconds per item, set once the loop's pace is measured
        self.due = 0.0  # when the item being fetched is done

    def start_batch(self, work: float) -> None:
        """The next items are one batch, each of ``work`` seconds."""
        self.work, self.due = work, time.perf_counter()

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        self.due += self.work
        while time.perf_counter() < self.due:  # busy, as a decoder keeps the CPU
            pass
        return self.X[i], self.y[i]


def _epochs(loader: DataLoader[Any]) -> Iterator[Batch]:
    while True:
        yield from loader


def _slow_dataset(recipe: Recipe, severity: float | None) -> Recipe:
    multiple = float(severity or 0.0)

    def dataloader(r: Recipe) -> Iterator[Batch]:
        items = _SlowItems(r.X_train, r.y_train)
        size = min(r.batch_size, len(items))
        order = torch.Generator().manual_seed(r.seed)
        loader = DataLoader(items, batch_size=size, shuffle=True, drop_last=True, generator=order)

        def per_item(seconds: float) -> None:
            items.start_batch(seconds / size)

        return _paced(_epochs(loader), multiple, per_item)

    return recipe.replace(loader=dataloader)


STARVED_LOADER: tuple[Variant, ...] = (
    Variant(
        "pause",
        "the loader pauses for every batch (a remote disk, a slow decode on the main thread)",
        "loader",
        _pause,
        Severity(
            5.0, LEAST_WAITING, MOST_WAITING, "wait per batch, in multiples of the compute per step"
        ),
    ),
    Variant(
        "slow_dataset",
        "a torch `DataLoader` (no workers) over a `Dataset` whose `__getitem__` is slow",
        "loader",
        _slow_dataset,
        Severity(
            5.0, LEAST_WAITING, MOST_WAITING, "work per batch, in multiples of the compute per step"
        ),
    ),
)
