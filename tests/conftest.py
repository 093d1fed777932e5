"""Shared fixtures: one trained grid per session, and a private record store.

Training is the slow part of the suite, so the canonical digits grid (three
seeds) is trained once, in parallel, and every test reads it. Each test process
(every pytest-xdist worker imports this file first) runs the pinned CPU kernels,
as the command line does: fixtures and tests train in it.
"""

# ruff: noqa: E402  (the pin comes before every import that may run torch)
from __future__ import annotations

import os

from faultbench.core import kernels

kernels.pin()
# No test stands on the shipped runs dataset (results/runs/) unless it says so: a test
# that trains expects to train, and its store starts empty (spawned workers inherit this).
os.environ["FAULTBENCH_RUNS"] = "none"

from collections.abc import Iterator
from pathlib import Path

import pytest

from faultbench.faults.fault import (
    FAULTS,
    HEALTHY,
    canonical_conditions,
    inapplicable,
    variant_ids,
)
from faultbench.storage.records import RunRecord, RunSpec
from faultbench.storage.runner import ensure_records
from faultbench.storage.store import Store
from faultbench.tasks.task import get_task
from faultbench.training.engine import LocalEngine, SerialEngine

SIGNAL_SEEDS = 3  # the issue asks for each fault's signal over at least 3 seeds
#: The known faults a classifier's grid holds (a language model's faults apply to sequence
#: tasks only: tests/test_language_faults.py), and digits' classic conditions.
CLASSIFIER_FAULTS = [n for n in FAULTS.names() if not inapplicable(n, get_task("digits"))]
DIGITS_CONDITIONS = [HEALTHY, *CLASSIFIER_FAULTS]
#: Every variant that applies to a classifier task (digits or shapes).
CLASSIFIER_VARIANTS = [
    i for i in variant_ids() if any(not inapplicable(i, get_task(t)) for t in ("digits", "shapes"))
]


@pytest.fixture(autouse=True)
def private_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test gets an empty default store, never the user's cache."""
    root = tmp_path / "store"
    monkeypatch.setenv("FAULTBENCH_STORE", str(root))
    return root


@pytest.fixture(scope="session")
def trainer() -> SerialEngine:
    """The engine of the fixtures that train many runs: this process, one run at a time.

    pytest-xdist already gives each test worker a core, and a pool beside it costs more
    than it gives: each of its processes pays its imports, and a run of the ``workers``
    loader starts its DataLoader worker by spawning an interpreter there (a spawned
    process's children are spawned), where this process forks it. On the five test files
    that train the most, two test workers took 590 s of CPU (342 s wall) with a pool each
    and 486 s (304 s) in-process. A run trains to the same record either way.
    """
    return SerialEngine()


@pytest.fixture(scope="session")
def pool() -> Iterator[LocalEngine]:
    """One process pool per test worker, for the tests of what runs on a pool's workers
    (diagnosing ahead, a loader's worker in a pool process). Tests of the engine itself
    start their own."""
    engine = LocalEngine(workers=2)
    yield engine
    engine.close()


def _train_grid(
    root: Path, task_name: str, seeds: int, engine: SerialEngine
) -> dict[tuple[str, int], RunRecord]:
    task = get_task(task_name)
    specs = [
        RunSpec(task.name, task.fingerprint, cond, seed)
        for cond in canonical_conditions(task=task)
        for seed in range(seeds)
    ]
    store = Store(root)
    return {
        (spec.condition.name, spec.seed): record
        for spec, record, _ in ensure_records(specs, task, store=store, engine=engine)
    }


@pytest.fixture(scope="session")
def shared_store_root(tmp_path_factory: pytest.TempPathFactory, worker_id: str) -> Path:
    """A store holding the digits grid for seeds 0..2 (trained on first use).

    One for the whole run, shared by pytest-xdist's workers: each trains its fixtures'
    runs into it, and the store's locks see to it that a run both workers need (the
    digits grid, the variant runs) is trained once and read by the other, as two
    processes sharing a store do. Tests that need a store nobody else writes to use
    their own.
    """
    run_root = tmp_path_factory.getbasetemp()
    if worker_id != "master":  # each worker's temp folder sits in the run's
        run_root = run_root.parent
    root = run_root / "shared-store"
    root.mkdir(exist_ok=True)
    return root


@pytest.fixture(scope="session")
def digits_grid(shared_store_root: Path, trainer: SerialEngine) -> dict[tuple[str, int], RunRecord]:
    """(condition, seed) -> record for the canonical digits grid, seeds 0..2."""
    return _train_grid(shared_store_root, "digits", SIGNAL_SEEDS, trainer)


@pytest.fixture(scope="session")
def synthetic_grid(
    shared_store_root: Path, trainer: SerialEngine
) -> dict[tuple[str, int], RunRecord]:
    """(condition, seed) -> record for the canonical synthetic grid, seeds 0..2."""
    return _train_grid(shared_store_root, "synthetic", SIGNAL_SEEDS, trainer)
