"""SIGKILL the benchmark mid-grid, run it again: nothing lost, nothing duplicated,
nothing that had finished is trained again."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from faultbench.faults.fault import canonical_conditions
from faultbench.storage.records import RunSpec
from faultbench.storage.store import Store
from faultbench.tasks.task import get_task

ROOT = Path(__file__).resolve().parents[1]
SEEDS = 1  # ten runs: the kill lands after three, mid-grid


def _command(store: Path) -> list[str]:
    return [
        sys.executable,
        "-m",
        "faultbench",
        "run",
        "--grid",
        "classic",
        "--diagnoser",
        "always-healthy",
        "--task",
        "digits",
        "--seeds",
        str(SEEDS),
        "--store",
        str(store),
        "--engine",
        "local",
        "--workers",
        "2",
        "--json",
    ]


def _files(store: Path) -> dict[Path, bytes]:
    return {p: p.read_bytes() for p in store.glob("*/*/seed-*/*/*.json")}


def test_sigkill_mid_grid_then_resume(tmp_path):
    store = tmp_path / "store"
    task = get_task("digits")
    specs = [
        RunSpec(task.name, task.fingerprint, c, s)
        for c in canonical_conditions(task=task)
        for s in range(SEEDS)
    ]
    proc = subprocess.Popen(
        _command(store),
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    deadline = time.monotonic() + 480
    while len(_files(store)) < 3 and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    os.killpg(proc.pid, signal.SIGKILL)  # the driver and its pool workers, mid-grid
    proc.wait()
    before = _files(store)
    print(f"\nrecords before the kill: {len(before)} of {len(specs)}")
    assert 0 < len(before) < len(specs), "the kill must land mid-grid"

    rerun = subprocess.run(_command(store), cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert rerun.returncode == 0, rerun.stderr
    after = _files(store)
    report = json.loads(rerun.stdout)
    print(f"records after the rerun: {len(after)}; trained by the rerun: {report['trained']}")

    assert report["total"] == len(specs) and report["failures"] == {}
    assert report["trained"] == len(specs) - len(before)  # finished runs were not retrained
    assert len(after) == len(specs)  # no duplicate, none lost
    for path, data in before.items():
        assert after[path] == data  # byte-identical, never rewritten
    reader = Store(store)
    used = {reader.load(spec).attempt for spec in specs}
    assert len(used) == len(specs) and not reader.notes
    assert {p.stem for p in before} <= used  # the pre-kill attempts are the ones used
    leftovers = list(store.rglob("*.part"))
    assert all(p.suffix == ".part" and p not in after for p in leftovers)
