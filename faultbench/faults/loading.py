"""The known fault of the loader: a pipeline the training step waits for.

Each variant says in one line what the bug is, in a user's terms, and which part
of the recipe it lives in; :mod:`faultbench.faults.known` registers them under
their fault.
"""

from __future__ import annotations

import statistics
import time
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

from faultbench.faults.batches import Rows, stack_rows, worker_loader
from faultbench.faults.fault import Severity, Variant
from faultbench.faults.recipe import Batch, Recipe

CALIBRATION_STEPS = 20  # steps a starved loader times before it starves; its window after
# The last part of a wait is spun, not slept: a sleep ends 70-150 us late here (up to
# 0.3 ms in 1 of 100, idle or with the other core busy), a whole digits step's 0.3 ms.
SPIN = 0.5e-3
# The knob's range ends at the canonical 5x a step: the signal is the share of
# each step spent waiting, m / (1 + m), 0.83 at 5x, and beyond it the share
# barely moves (0.98 at 50x) while every multiple adds a step's worth of waiting
# to each run. A sweep to 50x made the starved loader two thirds of a cold
# `make report`'s training; "severe" is where the sweep ends, so 5x is severe.
MOST_WAITING, LEAST_WAITING = 5.0, 0.2


# -- starved_loader ------------------------------------------------------------


class _Updates:
    """When the loop's last update ended: the wrapped ``recipe.update`` notes it."""

    def __init__(self) -> None:
        self.last = 0.0

    def timed(self, recipe: Recipe) -> Recipe:
        """``recipe`` whose update notes when it ends (and does nothing else)."""
        inner = recipe.update

        def update(model: nn.Module, optimizer: torch.optim.Optimizer, step: int) -> None:
            inner(model, optimizer, step)
            self.last = time.perf_counter()

        return recipe.replace(update=update)


def _paced(
    batches: Iterator[Batch],
    multiple: float,
    updates: _Updates,
    work: Callable[[float], None] = lambda seconds: None,
) -> Iterator[Batch]:
    """Yield from ``batches``, each ``multiple`` x the compute per step after it was asked for.

    A step's compute runs from handing its batch over to the end of its update (to
    the next request in a loop that does not call ``recipe.update``): what the
    Monitor times as compute, without its own recording or the loop's evaluations.
    The first ``CALIBRATION_STEPS`` steps are timed, not starved; after them each
    step waits ``multiple`` x the median compute of the last ``CALIBRATION_STEPS``
    steps, plus what the starved steps' waits so far fell short of ``multiple`` x
    their compute (less what they overshot: a sleep ending late, a busy machine
    preempting the wait or the compute). So the starved steps' share of waiting is
    ``m / (1 + m)`` as the Monitor measures it, on a fast machine and a slow one,
    and on one that gets busier mid-run. ``work(seconds)`` hands the fetch its part
    of the wait (a slow Dataset's items), less what fetching costs by itself; the
    batch is then held until the wait is over, its last ``SPIN`` seconds spun.
    """
    computes: deque[float] = deque(maxlen=CALIBRATION_STEPS)
    overheads: deque[float] = deque(maxlen=CALIBRATION_STEPS)  # a fetch beyond its work
    owed = 0.0  # multiple x the starved steps' compute, less their waits
    handed: float | None = None
    starving = False
    while True:
        asked = time.perf_counter()
        if handed is not None:
            computes.append((updates.last if updates.last > handed else asked) - handed)
            if starving:
                owed += multiple * computes[-1]
        starving = len(computes) == CALIBRATION_STEPS
        wait = max(0.0, multiple * statistics.median(computes) + owed) if starving else 0.0
        given = max(0.0, wait - statistics.median(overheads)) if overheads else wait
        work(given)
        batch = next(batches)
        overheads.append(time.perf_counter() - asked - given)
        _hold(asked + wait)
        handed = time.perf_counter()
        if starving:
            owed -= handed - asked
        yield batch


def _hold(until: float) -> None:
    """Return at ``until`` (a ``perf_counter`` time): sleep while it is far, then spin."""
    left = until - time.perf_counter()
    if left > SPIN:
        time.sleep(left - SPIN)
    while time.perf_counter() < until:
        pass


def _pause(recipe: Recipe, severity: float | None) -> Recipe:
    inner, multiple, updates = recipe.loader, float(severity or 0.0), _Updates()

    def paused(r: Recipe) -> Iterator[Batch]:
        return _paced(inner(r), multiple, updates)

    return updates.timed(recipe.replace(loader=paused))


class _SlowItems(Dataset[tuple[Any, torch.Tensor]]):
    """The training examples one at a time, each after ``work`` seconds of CPU work
    (what decoding or augmenting an item costs); with ``codes``, an example's inputs
    are ``(codes, x)``, as a model of two inputs takes them.

    Each item works until its own deadline, ``work`` after the last item's, counted
    from the start of the batch: a busy machine that preempts one item's work then
    shortens the next ones', so a batch costs its work, not its work plus every
    preemption.
    """

    def __init__(self, X: np.ndarray, y: np.ndarray, codes: np.ndarray | None = None) -> None:
        # One tensor per example, made once: indexing the two tensors cost 2 us an item,
        # 60 us a batch of 32, most of the 0.1 ms a digits step waits at 0.2x.
        inputs: list[Any] = list(torch.from_numpy(np.ascontiguousarray(X)))
        if codes is not None:
            inputs = list(zip(torch.from_numpy(np.ascontiguousarray(codes)), inputs, strict=True))
        self.X = inputs
        self.y = list(torch.from_numpy(np.ascontiguousarray(y)))
        self.work = 0.0  # seconds per item, set once the loop's pace is measured
        self.due = 0.0  # when the item being fetched is done

    def start_batch(self, work: float) -> None:
        """The next items are one batch, each of ``work`` seconds."""
        self.work, self.due = work, time.perf_counter()

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, i: int) -> tuple[Any, torch.Tensor]:
        self.due += self.work
        while time.perf_counter() < self.due:  # busy, as a decoder keeps the CPU
            pass
        return self.X[i], self.y[i]


def _stacked(items: list[tuple[Any, torch.Tensor]]) -> Batch:
    """The batch ``default_collate`` makes (the items' tensors stacked), at two thirds
    of its cost: a DataLoader's own cost is a wait too, most of a 0.2x digits one."""
    inputs, targets = zip(*items, strict=True)
    if isinstance(inputs[0], tuple):  # (codes, x) per example: a model of two inputs
        return tuple(torch.stack(part) for part in zip(*inputs, strict=True)), torch.stack(targets)
    return torch.stack(inputs), torch.stack(targets)


def _epochs(loader: DataLoader[Any]) -> Iterator[Batch]:
    while True:
        yield from loader


def _slow_dataset(recipe: Recipe, severity: float | None) -> Recipe:
    multiple, updates = float(severity or 0.0), _Updates()

    def dataloader(r: Recipe) -> Iterator[Batch]:
        items = _SlowItems(r.X_train, r.y_train, r.codes_train)
        size = min(r.batch_size, len(items))
        order = torch.Generator().manual_seed(r.seed)
        loader = DataLoader(
            items, size, shuffle=True, drop_last=True, generator=order, collate_fn=_stacked
        )

        def per_item(seconds: float) -> None:
            items.start_batch(seconds / size)

        return _paced(_epochs(loader), multiple, updates, per_item)

    return updates.timed(recipe.replace(loader=dataloader))


def _one_worker(recipe: Recipe, severity: float | None) -> Recipe:
    """Batches made item by item in one worker process and handed over one at a time: the
    loader the family's ``workers`` form was until it starved the small models it fed."""

    def dataloader(r: Recipe) -> Iterator[Batch]:
        rows = Rows(r.X_train, r.y_train, r.codes_train)
        size = min(r.batch_size, len(rows))
        order = torch.Generator().manual_seed(r.seed)
        return _epochs(
            worker_loader(
                rows,
                batch_size=size,
                shuffle=True,
                drop_last=True,
                generator=order,
                collate_fn=stack_rows,
            )
        )

    return recipe.replace(loader=dataloader)


# The two paced variants also wrap the recipe's update, only to time it (_Updates): the bug lives
# in the loader.
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
    # No knob: its wait is what a hand-over costs (about a millisecond a batch here), so it
    # starves a model whose step is shorter and shows on the tasks whose models are small.
    Variant(
        "one_worker",
        "a `DataLoader` with one worker (`num_workers=1`) that makes each batch item by item "
        "and hands it over from its process, in front of a model whose step is shorter",
        "loader",
        _one_worker,
    ),
)
