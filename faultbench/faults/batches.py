"""How a run's training batches arrive: the loader a practitioner wrote, one of four forms.

A design's ``loader`` (:data:`faultbench.tasks.design.LOADERS`) names it:

- ``tensors``: ready tensors indexed by a shuffled permutation (:class:`BatchStream`), the
  benchmark's original loader, and the reference designs' (a loader costs nothing);
- ``dataloader``: a torch ``DataLoader`` over a ``TensorDataset`` whose sampler draws a
  batch's indices as one tensor (:class:`ShuffledBatches`, ``batch_size=None``), so each
  tensor is indexed once a batch: the fast way to load in-memory tensors;
- ``dataset``: a ``Dataset`` that turns the rows it is asked for into tensors
  (``__getitems__``: a batch's rows at once) and a ``collate_fn`` that passes them on;
- ``workers``: that ``Dataset`` behind one persistent worker process, which makes shards of
  :data:`SHARD_BATCHES` batches (:class:`EndlessShards`: epochs one after another) and
  prefetches the next ones while the model steps; the main process cuts each shard into
  batches. Its first shard is handed over before the first step, as a model is built before
  it: a worker's start (50-100 ms) is nothing to a real run and a third of a run here.

None of the four makes a healthy run data-bound: a loader's wait is a small part of even
the smallest model's step (docs/faults.md, "data-bound"). Handing every batch, made item by
item, over from a worker process is not one of them: it costs about a millisecond a batch
here, more than a small model's whole step, which is the starved loader's ``one_worker``
variant (:mod:`faultbench.faults.loading`). The worker is forked (``multiprocessing_context``), as a
script run by hand on Linux forks it, also in the engine's spawned processes, whose children
would otherwise spawn and wait seconds for an interpreter to import torch.

Every form yields the same kind of batch, ``(inputs, targets)`` with ``inputs`` a tensor or,
for a model of two inputs, ``(codes, numbers)``, endlessly (epochs follow each other), full
batches only; every draw is seeded, so the same seed gives the same batches. The four
forms' orders differ (each shuffles with its own generator), as two scripts' would.
"""

from __future__ import annotations

import itertools
import multiprocessing
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch
from torch.utils.data import (
    DataLoader,
    Dataset,
    Sampler,
    TensorDataset,
)

from faultbench.core.errors import FaultbenchError, unknown_name
from faultbench.tasks.design import LOADERS

__all__ = [
    "Batch",
    "BatchStream",
    "EndlessShards",
    "Rows",
    "ShuffledBatches",
    "batches",
    "stack_rows",
    "worker_loader",
]

#: Batches a worker hands over at once: a hand-over costs about a millisecond here, so one
#: per 32 batches is under a tenth of even a 0.4 ms step.
SHARD_BATCHES = 256
#: How the loader worker starts: forked, as on Linux by hand (spawning imports torch anew).
WORKER_START = "fork"

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
        whole = ShuffledBatches(len(y), size, order)
        # Its own generator for the seed a DataLoader draws as each epoch starts: from the
        # global one it would move the random state a step's dropout draws from between
        # two steps (an instrument that replays a step's forward restores that state).
        own = torch.Generator().manual_seed(seed)
        indexed = DataLoader(TensorDataset(*tensors), None, sampler=whole, generator=own)
        return _as_batches(_epochs(indexed))
    if loader == "dataset":
        rows = DataLoader(
            BatchedRows(X, y, codes),
            size,
            shuffle=True,
            drop_last=True,
            generator=order,
            collate_fn=_as_is,
        )
        return _epochs(rows)
    if loader != "workers":
        raise unknown_name("loader", loader, LOADERS)
    shards = EndlessShards(len(y), size, SHARD_BATCHES, order)
    own = torch.Generator().manual_seed(seed)  # as the dataloader's: none of the global state
    batched = BatchedRows(X, y, codes)
    stream = iter(worker_loader(batched, batch_sampler=shards, collate_fn=_as_is, generator=own))
    # Set up as the model is: the worker starts and hands its first shard over before the
    # first step (a run here computes for a third of a second, a real one for hours, over
    # which a worker's start of 50-100 ms is nothing); from there on it prefetches.
    first = next(stream)
    return _cut(itertools.chain([first], stream), size)


def worker_loader(rows: Dataset[Any], **options: Any) -> DataLoader[Any]:
    """A ``DataLoader`` of ``rows`` (with ``options``) whose one persistent, forked worker
    fetches each batch, and the next ones (prefetching), while the model steps.

    Raises:
        FaultbenchError: in a daemonic process, which may not start one.
    """
    if multiprocessing.current_process().daemon:
        raise FaultbenchError(
            "a loader with a worker starts a DataLoader worker process, which this daemonic "
            "process cannot (a Dask worker is one unless its config sets "
            "distributed.worker.daemon: False); expected a process that may have children, "
            "as the local engine's are"
        )
    return DataLoader(
        rows,
        num_workers=1,
        persistent_workers=True,
        prefetch_factor=2,
        multiprocessing_context=WORKER_START,
        **options,
    )


class ShuffledBatches(Sampler[torch.Tensor]):
    """One shuffled epoch of ``rows`` from the seeded ``order``, as the index tensors of its
    full batches of ``size``: a ``TensorDataset`` takes a batch in one indexing per tensor."""

    def __init__(self, rows: int, size: int, order: torch.Generator) -> None:
        self.rows, self.size, self.order = rows, size, order

    def __len__(self) -> int:
        return self.rows // self.size

    def __iter__(self) -> Iterator[torch.Tensor]:
        epoch = torch.randperm(self.rows, generator=self.order)
        return iter(epoch[: len(self) * self.size].split(self.size))


class EndlessShards(Sampler[list[int]]):
    """Shards of ``batches`` full batches of ``size`` rows each, endlessly: shuffled epochs
    one after another (an epoch's rows beyond its last full batch left out) from the seeded
    ``order``, a shard running on into the next epoch, so a shard is handed over once per
    ``batches`` steps whatever an epoch's length."""

    def __init__(self, rows: int, size: int, batches: int, order: torch.Generator) -> None:
        self.rows, self.size, self.batches, self.order = rows, size, batches, order

    def __iter__(self) -> Iterator[list[int]]:
        used = self.rows - self.rows % self.size  # full batches only
        shard: list[int] = []
        while True:
            shard += torch.randperm(self.rows, generator=self.order)[:used].tolist()
            while len(shard) >= self.size * self.batches:
                yield shard[: self.size * self.batches]
                shard = shard[self.size * self.batches :]


def _cut(shards: Iterator[Batch], size: int) -> Iterator[Batch]:
    """Each shard's full batches of ``size`` rows, in order (views: nothing is copied)."""
    for inputs, targets in shards:
        for start in range(0, len(targets) - size + 1, size):
            part = slice(start, start + size)
            if isinstance(inputs, tuple):
                yield tuple(x[part] for x in inputs), targets[part]
            else:
                yield inputs[part], targets[part]


def _as_is(batch: Any) -> Any:  # typed as torch types a collate_fn: it takes a list
    """A ``collate_fn`` for a batch that :meth:`BatchedRows.__getitems__` made already."""
    return batch


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


class BatchedRows(Dataset[Batch]):
    """The training rows, made into tensors a batch at a time: a ``DataLoader`` asks for a
    batch's indices at once (``__getitems__``) and gets the batch, as ``stack_rows`` of
    :class:`Rows`' items would make it, for one indexing of the arrays instead of one a row."""

    def __init__(self, X: np.ndarray, y: np.ndarray, codes: np.ndarray | None = None) -> None:
        self.X, self.y, self.codes = X, y, codes

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, i: int) -> Batch:
        return Rows(self.X, self.y, self.codes)[i]

    def __getitems__(self, indices: list[int]) -> Batch:
        x, target = torch.from_numpy(self.X[indices]), torch.from_numpy(self.y[indices])
        if self.codes is None:
            return x, target
        return (torch.from_numpy(self.codes[indices]), x), target


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
