"""Engines: a Dask LocalCluster trains the same records as the local pool, run for run, on
the pinned CPU kernels."""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

import numpy as np
import pytest

from conftest import DIGITS_CONDITIONS
from faultbench.cli.main import main as cli_main
from faultbench.core import kernels
from faultbench.core.errors import FaultbenchError
from faultbench.storage.records import RunRecord, RunSpec
from faultbench.storage.runner import ensure_records
from faultbench.storage.store import Store
from faultbench.tasks.task import get_task
from faultbench.training.engine import ENGINES, DaskEngine, LocalEngine, WorkerDied, make_engine

TIMING = ("wait_seconds", "compute_seconds")  # differ between any two runs; not compared


def assert_same_run(a: RunRecord, b: RunRecord) -> None:
    """Every recorded quantity equal (NaN equal to NaN), timings excluded."""
    assert (a.spec, a.key, a.status, a.config) == (b.spec, b.key, b.status, b.config)
    assert a.trace is not None and b.trace is not None
    da, db = a.trace.to_dict(), b.trace.to_dict()
    assert da.keys() == db.keys()
    for name in da.keys() - set(TIMING):
        x, y = da[name], db[name]
        if name == "no_grad_sampled":
            assert x == y, name  # sampling -> layer -> count
            continue
        if isinstance(x, dict) and any(isinstance(v, dict) for v in x.values()):
            assert x == y, name  # counts nested by step and layer (at_steps): compared whole
            continue
        if isinstance(x, dict):
            assert x.keys() == y.keys(), name
            pairs = [(f"{name}.{k}", x[k], y[k]) for k in x]
        else:
            pairs = [(name, x, y)]
        for label, u, v in pairs:
            assert np.array_equal(np.asarray(u, float), np.asarray(v, float), equal_nan=True), label


def test_dask_local_cluster_matches_local_engine_run_for_run(
    digits_grid: dict[tuple[str, int], RunRecord],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in kernels.ENVIRONMENT:  # the cluster pins its workers itself
        monkeypatch.delenv(name)
    task = get_task("digits")
    specs = [
        RunSpec(task.name, task.fingerprint, record.spec.condition, 0)
        for (name, seed), record in sorted(digits_grid.items())
        if seed == 0
    ]
    assert len(specs) == len(DIGITS_CONDITIONS)  # every fault, trained on the cluster
    engine = DaskEngine(workers=2)
    try:
        assert len(engine._client.scheduler_info()["workers"]) == 2
        assert set(engine._client.run(kernels.capability).values()) == {kernels.CAPABILITY}
        got = list(ensure_records(specs, task, store=Store(tmp_path), engine=engine))
    finally:
        engine.close()
    assert [fresh for _, _, fresh in got] == [True] * len(specs)
    for spec, record, _ in got:
        assert_same_run(record, digits_grid[(spec.condition.name, 0)])
    # The driver wrote every record; a rerun on the local engine finds them all.
    again = list(ensure_records(specs, task, store=Store(tmp_path), engine=LocalEngine(1)))
    assert not any(fresh for _, _, fresh in again)


def test_unreachable_dask_scheduler_is_one_clear_line(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["run", "--diagnoser", "always-healthy", "--task", "digits", "--engine", "dask"]
    status = cli_main([*argv, "--address", "tcp://127.0.0.1:1"])
    err = capsys.readouterr().err
    assert status == 2
    assert err.count("\n") == 1
    assert "cannot reach the Dask scheduler at 'tcp://127.0.0.1:1'" in err


def test_address_without_dask_engine_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["run", "--diagnoser", "always-healthy", "--task", "digits"]
    assert cli_main([*argv, "--address", "tcp://127.0.0.1:1"]) == 2
    assert "needs --engine dask" in capsys.readouterr().err


@pytest.mark.parametrize("name", ["dusk", "locale"])
def test_unknown_engine_names_the_nearest(name: str) -> None:
    with pytest.raises(FaultbenchError, match=re.escape(f"Unknown engine '{name}'. Did you mean")):
        make_engine(name)
    assert set(ENGINES) == {"local", "serial", "dask"}


def test_local_pool_starts_only_when_there_is_work() -> None:
    engine = LocalEngine(2)
    assert list(engine.map_unordered(abs, [])) == []
    assert engine._executor is None  # a fully stored grid never pays for a pool
    try:
        assert {r for _, r in engine.map_unordered(abs, [-3, 1, -2])} == {1, 2, 3}
        first = engine._executor
        assert [r for _, r in engine.map_unordered(abs, [-5])] == [5]
        assert engine._executor is first  # reused, not restarted
    finally:
        engine.close()
    assert engine._executor is None


def _double_or_die(item: object) -> object:
    """Kill the worker for "die"; otherwise take a little while and double."""
    if item == "die":
        os._exit(1)
    time.sleep(0.2)
    return 2 * item  # type: ignore[operator]


def test_a_dying_task_does_not_take_its_neighbours_down() -> None:
    engine = LocalEngine(workers=2)
    try:
        results = dict(engine.map_unordered(_double_or_die, ["die", 1, 2, 3]))
    finally:
        engine.close()
    assert {k: v for k, v in results.items() if k != "die"} == {1: 2, 2: 4, 3: 6}
    assert isinstance(results["die"], WorkerDied)
    assert "worker died 3 times" in str(results["die"])
