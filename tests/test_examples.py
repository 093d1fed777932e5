"""examples/train_a_diagnoser.py: a diagnoser trained from a runs dataset alone, then scored.

A small slice of the board (the classic grids of two tuned-on tasks) is trained into a
scratch store and exported as a runs dataset, as `make runs` exports the board's; the
example reads it with pandas, and `faultbench run` scores its diagnoser from it.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import pandas as pd
import pytest

import faultbench as fb
from faultbench.storage.store import Store

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "examples" / "train_a_diagnoser.py"
FAULTBENCH = Path(sys.executable).with_name("faultbench")
SLICE = {"diabetes": 1, "digits": 1}  # classic-grid seeds of the tuned-on tasks it trains on


def _cli(*args: str, env: dict[str, str] | None = None) -> str:
    proc = subprocess.run(
        args,
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
        env={**os.environ, **(env or {})},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


@pytest.fixture(scope="module")
def runs_dataset(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(store, dataset): the slice trained into a store, then exported from it."""
    root = tmp_path_factory.mktemp("slice")
    store = Store(root / "store", runs=None)
    for task, seeds in SLICE.items():
        fb.evaluate("always-healthy", task, grid="classic", seeds=seeds, store=store)
    out = root / "runs"
    _cli(
        str(FAULTBENCH),
        "runs",
        "export",
        "--store",
        str(store.root),
        "--runs",
        "none",
        "--out",
        str(out),
    )
    return store.root, out


def test_the_example_trains_from_the_dataset_alone(runs_dataset: tuple[Path, Path]) -> None:
    _, dataset = runs_dataset
    out = _cli(sys.executable, str(SCRIPT), str(dataset))
    runs = pd.read_parquet(dataset / "runs")
    assert set(runs.task) == set(SLICE)
    # It learned every label of the slice: healthy and each known fault the tasks have.
    learned = out.splitlines()[0].partition("labels: ")[2].split()
    assert sorted(learned) == sorted(set(runs.fault))


def _example_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("train_a_diagnoser", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_it_reads_the_features_it_learned_from_off_the_runs_faultbench_hands_it(
    runs_dataset: tuple[Path, Path],
) -> None:
    """The dataset's side (pandas) and the diagnoser's (run.trace) compute the same numbers."""
    store, dataset = runs_dataset
    example = _example_module()
    X, _ = example.read_dataset(str(dataset))
    seen: list[tuple[float, ...]] = []

    class Recording(example.TracesForest):  # type: ignore[name-defined,misc]
        def diagnose(self, run: fb.Run) -> fb.Diagnosis:
            c = run.config
            grads = np.array(list(run.trace.grad_norm.values()))
            x = example.features(
                run.trace.loss, run.trace.val_acc, grads, c.chance, c.loss_reference
            )
            seen.append(tuple(np.round(x, 9)))
            return fb.Diagnosis("healthy")

    for task, seeds in SLICE.items():
        fb.evaluate(
            Recording(),
            task,
            grid="classic",
            seeds=seeds,
            store=Store(store, runs=dataset),
            isolate=False,
        )
    assert sorted(seen) == sorted(tuple(np.round(x, 9)) for x in X)


def test_its_diagnoser_is_scored_from_the_dataset(runs_dataset: tuple[Path, Path]) -> None:
    store, dataset = runs_dataset
    report = json.loads(
        _cli(
            str(FAULTBENCH),
            "run",
            "--diagnoser",
            "examples.train_a_diagnoser:TracesForest",
            "--task",
            "diabetes",
            "--grid",
            "classic",
            "--seeds",
            "1",
            "--json",
            "--store",
            str(store),
            "--runs",
            str(dataset),
            env={"FAULTBENCH_RUNS": str(dataset)},
        )
    )
    runs = pd.read_parquet(dataset / "runs", filters=[("task", "=", "diabetes")])
    labels = set(pd.read_parquet(dataset / "runs").fault)
    assert report["diagnoser"] == "traces-forest" and report["tuned"]
    assert not report["failures"]
    assert report["total"] == int((runs.seed == 0).sum())
    answered = {p for row in report["confusion"].values() for p, n in row.items() if n}
    assert answered <= labels  # every answer is a label it learned, none failed
    # One run per condition: a constant answer names one; fitted on these runs, it names more.
    assert report["correct"] > 1
