"""The loader axis: each way batches arrive hands over every training row once an epoch, the
same batches for the same seed, in the shapes the ready tensors have, and a loader with a
worker process trains in the engine's workers as it does here."""

from __future__ import annotations

import multiprocessing
import re
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch
from sklearn.datasets import load_iris
from torch.utils.data import DataLoader, TensorDataset

import faultbench as fb
from faultbench.faults.batches import Batch, batches
from faultbench.faults.fault import Condition
from faultbench.faults.recipe import base_setup, steps_per_epoch
from faultbench.storage.records import RunSpec
from faultbench.storage.runner import ensure_records
from faultbench.storage.store import Store
from faultbench.tasks.design import LOADERS
from faultbench.tasks.task import TrainDefaults, get_task
from faultbench.training.engine import LocalEngine
from faultbench.training.loop import train

TASKS = ("digits", "churn", "cancer")  # one input and class indices; two inputs; (N, 1) floats


def _stream(task: fb.Task, loader: str, seed: int = 0, batch_size: int = 32):  # type: ignore[no-untyped-def]
    return batches(
        loader,
        task.X_train,
        task.y_train,
        batch_size=batch_size,
        seed=seed,
        codes=task.codes_train,
    )


def _take(stream, n: int) -> list[Batch]:  # type: ignore[no-untyped-def]
    return [next(stream) for _ in range(n)]


def _parts(batch: Batch) -> list[torch.Tensor]:
    """A batch's tensors: its inputs (one, or codes then numbers) and its targets."""
    inputs, targets = batch
    return [*(inputs if isinstance(inputs, tuple) else (inputs,)), targets]


def _rows(parts: list[np.ndarray]) -> Counter[bytes]:
    """Each example's inputs and target together, as bytes, counted."""
    n = len(parts[-1])
    return Counter(b"".join(np.ascontiguousarray(p[i]).tobytes() for p in parts) for i in range(n))


@pytest.mark.parametrize("task", TASKS)
@pytest.mark.parametrize("loader", LOADERS)
def test_every_loader_hands_over_each_row_once_an_epoch(loader: str, task: str) -> None:
    the_task = get_task(task)
    recipe = base_setup(the_task, 0, the_task.reference_design().replace(loader=loader))
    per_epoch = steps_per_epoch(recipe)
    epoch = _take(recipe.loader(recipe), per_epoch)
    columns = [torch.cat(part).numpy() for part in zip(*map(_parts, epoch), strict=True)]
    seen = _rows(columns)
    training = [
        p for p in (the_task.codes_train, the_task.X_train, the_task.y_train) if p is not None
    ]
    assert sum(seen.values()) == per_epoch * recipe.batch_size  # full batches only
    assert not seen - _rows(training)  # every row a training row, none twice more than it is


@pytest.mark.parametrize("task", TASKS)
@pytest.mark.parametrize("loader", LOADERS)
def test_a_loader_hands_over_the_shapes_and_types_of_ready_tensors(loader: str, task: str) -> None:
    the_task = get_task(task)
    ready, batch = next(_stream(the_task, "tensors")), next(_stream(the_task, loader))
    assert type(batch[0]) is type(ready[0])
    for part, expected in zip(_parts(batch), _parts(ready), strict=True):
        assert part.shape == expected.shape and part.dtype == expected.dtype


@pytest.mark.parametrize("loader", LOADERS)
def test_the_same_seed_gives_the_same_batches_and_another_seed_others(loader: str) -> None:
    task = get_task("churn")
    n = 2 * steps_per_epoch(base_setup(task, 0)) + 3  # into a third epoch
    first, again = _take(_stream(task, loader), n), _take(_stream(task, loader), n)
    for a, b in zip(first, again, strict=True):
        assert all(torch.equal(x, y) for x, y in zip(_parts(a), _parts(b), strict=True))
    other = next(_stream(task, loader, seed=1))
    assert not torch.equal(_parts(other)[-1], _parts(first[0])[-1])


def test_a_dataset_made_a_batch_at_once_hands_over_what_one_made_item_by_item_does() -> None:
    # The same sampler, seeded alike: only how a batch is made differs (and what it costs).
    task = get_task("digits")
    per_item = DataLoader(
        TensorDataset(torch.from_numpy(task.X_train), torch.from_numpy(task.y_train)),
        batch_size=32,
        shuffle=True,
        drop_last=True,
        generator=torch.Generator().manual_seed(0),
    )
    at_once = _take(_stream(task, "dataset"), len(per_item))
    for a, b in zip(at_once, per_item, strict=True):
        assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]) and a[0].dtype == b[0].dtype


def test_an_unknown_loader_is_refused_with_the_nearest_name() -> None:
    with pytest.raises(
        fb.FaultbenchError,
        match=re.escape("Unknown loader 'dataloaders'. Did you mean 'dataloader'?"),
    ):
        _stream(get_task("digits"), "dataloaders")


def test_a_worker_loader_trains_in_the_engines_worker_as_in_this_process(
    tmp_path: Path, pool: LocalEngine
) -> None:
    iris = load_iris()
    task = fb.Task.from_arrays(
        "iris-workers", iris.data, iris.target, defaults=TrainDefaults(steps=60, hidden=16)
    )
    design = task.reference_design().replace(loader="workers")
    before = set(multiprocessing.active_children())  # the session's engine pool, if any
    here = train(base_setup(task, 3, design)).trace
    assert here is not None and set(multiprocessing.active_children()) <= before  # it ended
    spec = RunSpec(task.name, task.fingerprint, Condition(), 3, design)
    ((_, record, _),) = ensure_records(
        [spec], task, store=Store(tmp_path), engine=pool, progress=False
    )
    assert record.ok and record.trace is not None, record.error
    assert np.array_equal(record.trace.loss, here.loss)  # the same batches, the same bits
    assert np.array_equal(record.trace.val_acc, here.val_acc)


def _workers_in_a_daemon(answers: multiprocessing.Queue) -> None:  # type: ignore[type-arg]
    try:
        next(_stream(get_task("digits"), "workers"))
        answers.put("started")
    except fb.FaultbenchError as exc:
        answers.put(str(exc))


def test_a_worker_loader_in_a_daemonic_process_says_why_it_cannot_start() -> None:
    # A daemonic process may have no child (a Dask worker is one by default): one clear line.
    fork = multiprocessing.get_context("fork")
    answers = fork.Queue()
    daemon = fork.Process(target=_workers_in_a_daemon, args=(answers,), daemon=True)
    daemon.start()
    answer = answers.get(timeout=120)
    daemon.join(timeout=60)
    assert answer.startswith("a loader with a worker starts a DataLoader worker process, which")
    assert "distributed.worker.daemon: False" in answer
