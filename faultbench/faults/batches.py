"""How a run's training batches arrive: the loader a practitioner wrote, one of four forms.

A design's ``loader`` (:data:`faultbench.tasks.design.LOADERS`) names it:

- ``tensors``: ready tensors indexed by a shuffled permutation (:class:`BatchStream`), the
  benchmark's original loader, and the reference designs' (a loader costs nothing);
- ``dataloader``: a torch ``DataLoader`` over a ``TensorDataset``, default collate, shuffled
  by a seeded generator: what most scripts write (about 0.1 ms a batch, which is 0.2-0.3 of a
  small model's step);
- ``dataset``: a ``Dataset`` whose ``__getitem__`` turns one row into tensors (per-item work,
  about 10 us an item here) and a ``collate_fn`` that stacks them;
- ``workers``: that ``Dataset`` and ``collate_fn`` behind one persistent worker process
  (``num_workers=1``), which prepares batches while the model steps.

Every form yields the same kind of batch, ``(inputs, targets)`` with ``inputs`` a tensor or,
for a model of two inputs, ``(codes, numbers)``, endlessly (epochs follow each other), full
batches only; every draw is seeded, so the same seed gives the same batches. The four
forms' orders differ (each shuffles with its own generator), as two scripts' would.
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, TensorDataset

from faultbench.core.errors import FaultbenchError, unknown_name
from faultbench.tasks.design import LOADERS

__all__ = ["Batch", "BatchStream", "Rows", "batches", "stack_rows"]

Batch = tuple[Any, torch.Tensor]  # (inputs: a tensor, or a tuple for a model of two, targets)


def batches(
    loader: str,
    X: np.ndarray,
    y: np.ndarray,
    *,
    batch_size: int,
    seed: int,
    codes: np.ndarray | None = None,
) -> Iterator[Batch]:
    """Endless training batches of rows ``X`` (with their ``codes``) and targets ``y``, as
    the loader named ``loader`` hands them over.

    Raises:
        FaultbenchError: an unknown loader name (with the nearest one).
    """
    size = min(batch_size, len(y))
    if loader == "tensors":
        return iter(BatchStream(X, y, batch_size=size, seed=seed, codes=codes))
    order = torch.Generator().manual_seed(seed)  # the sampler's shuffle, epoch after epoch
    if loader == "dataloader":
        tensors = [
            torch.from_numpy(np.ascontiguousarray(a)) for a in (codes, X, y) if a is not None
        ]
        plain = DataLoader(
            TensorDataset(*tensors), size, shuffle=True, drop_last=True, generator=order
        )
        return _as_batches(_epochs(plain))
    if loader not in LOADERS:
        raise unknown_name("loader", loader, LOADERS)
    workers = 1 if loader == "workers" else 0
    if workers and multiprocessing.current_process().daemon:
        raise FaultbenchError(
            "loader 'workers' starts a DataLoader worker process, which this daemonic process "
            "cannot (a Dask worker is one unless its config sets distributed.worker.daemon: "
            "False); expected a process that may have children, as the local engine's are"
        )
    items = DataLoader(
        Rows(X, y, codes),
        size,
        shuffle=True,
        drop_last=True,
        generator=order,
        collate_fn=stack_rows,
        num_workers=workers,
        persistent_workers=workers > 0,
    )
    return _epochs(items)


def _epochs(loader: DataLoader[Any]) -> Iterator[Any]:
    while True:
        yield from loader


def _as_batches(stream: Iterator[list[torch.Tensor]]) -> Iterator[Batch]:
    """``TensorDataset``'s batches, ``[codes, X, y]`` or ``[X, y]``, as ``(inputs, y)``."""
    for parts in stream:
        *inputs, y = parts
        yield (tuple(inputs) if len(inputs) > 1 else inputs[0]), y


class Rows(Dataset[Batch]):
    """The training rows one at a time, each made into tensors as it is asked for: the
    per-item work of a user's ``Dataset`` over arrays (``torch.from_numpy`` of the row, the
    target as a tensor), which changes no value."""

    def __init__(self, X: np.ndarray, y: np.ndarray, codes: np.ndarray | None = None) -> None:
        self.X, self.y, self.codes = X, y, codes

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, i: int) -> Batch:
        x, target = torch.from_numpy(self.X[i]), torch.as_tensor(self.y[i])
        if self.codes is None:
            return x, target
        return (torch.from_numpy(self.codes[i]), x), target


def stack_rows(items: list[Batch]) -> Batch:
    """A batch of :class:`Rows`' items: each part's tensors stacked (a ``collate_fn``)."""
    inputs, targets = zip(*items, strict=True)
    if isinstance(inputs[0], tuple):
        return tuple(torch.stack(part) for part in zip(*inputs, strict=True)), torch.stack(targets)
    return torch.stack(inputs), torch.stack(targets)


class BatchStream:
    """Endless shuffled mini-batches, reshuffled every epoch from a seeded generator.

    With ``codes``, a batch's inputs are ``(codes, X)``: a model of two inputs.
    """

    def __init__(
        self,
        X: np.ndarray,
        y: np.ndarray,
        *,
        batch_size: int,
        seed: int,
        codes: np.ndarray | None = None,
    ) -> None:
        self.X = torch.from_numpy(np.ascontiguousarray(X))
        self.y = torch.from_numpy(np.ascontiguousarray(y))
        self.codes = None if codes is None else torch.from_numpy(np.ascontiguousarray(codes))
        self.batch_size = min(batch_size, len(y))
        self._rng = np.random.Generator(np.random.PCG64(seed))

    def __iter__(self) -> Iterator[Batch]:
        n = len(self.y)
        while True:
            order = torch.from_numpy(self._rng.permutation(n))
            for start in range(0, n - self.batch_size + 1, self.batch_size):
                idx = order[start : start + self.batch_size]
                if self.codes is None:
                    yield self.X[idx], self.y[idx]
                else:
                    yield (self.codes[idx], self.X[idx]), self.y[idx]
