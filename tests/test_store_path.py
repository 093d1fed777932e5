"""A store that cannot be one is refused in one line before any run trains; a
read-only store that already holds every run it is asked for still works."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from faultbench.core.errors import FaultbenchError
from faultbench.scoring.evaluate import evaluate
from faultbench.storage.store import Store

RUN = [
    "run",
    "--grid",
    "classic",
    "--diagnoser",
    "always-healthy",
    "--task",
    "digits",
    "--seeds",
    "1",
    "--json",
]


def _cli(argv: list[str], *, read_only: Path | None = None) -> subprocess.CompletedProcess[str]:
    """``python -m faultbench ARGV``, with ``read_only`` (a directory) unwritable meanwhile.

    A normal user gets the directory's write bits removed. Root writes through
    any mode, so for root the directory becomes a read-only bind mount, in a
    mount namespace of the command's own (``unshare -m``): a real read-only
    file system, seen by that command only.
    """
    command = [sys.executable, "-m", "faultbench", *argv]
    if read_only is None:
        return subprocess.run(command, capture_output=True, text=True, timeout=300)
    if os.geteuid() != 0:
        modes = {p: p.stat().st_mode for p in [read_only, *read_only.rglob("*")] if p.is_dir()}
        try:
            for path in modes:
                path.chmod(0o555)
            return subprocess.run(command, capture_output=True, text=True, timeout=300)
        finally:
            for path, mode in modes.items():
                path.chmod(mode)
    if shutil.which("unshare") is None:
        pytest.skip("running as root without unshare: no way to make a directory read-only")
    mount = 'mount --bind "$0" "$0" && mount -o remount,ro,bind "$0" "$0" && exec "$@"'
    wrapped = ["unshare", "-m", "sh", "-c", mount, str(read_only), *command]
    proc = subprocess.run(wrapped, capture_output=True, text=True, timeout=300)
    if proc.returncode != 0 and "mount" in proc.stderr and "faultbench" not in proc.stderr:
        pytest.skip(f"cannot mount read-only here: {proc.stderr.strip()}")
    return proc


def _one_line(proc: subprocess.CompletedProcess[str]) -> str:
    """The one stderr line of a refused command: exit 2, no traceback, no progress line."""
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2, proc.stderr
    assert len(lines) == 1, lines  # a training progress line would show work had started
    assert proc.stdout == ""
    return lines[0]


def _records(root: Path) -> list[Path]:
    """The run records' attempt files (not the diagnoses stored beside them)."""
    return sorted(root.glob("*/*/seed-*/*/*.json")) if root.exists() else []


def test_store_that_is_a_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "runs.txt"
    path.write_text("not a store\n")
    line = _one_line(_cli([*RUN, "--store", str(path)]))
    assert line == (
        f"faultbench: error: record store '{path}' is a file, not a directory; expected a "
        "directory (or a path where one can be created), e.g. --store ./runs"
    )


def test_store_under_a_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("")
    line = _one_line(_cli([*RUN, "--store", str(tmp_path / "f" / "sub" / "runs")]))
    assert f"is under '{tmp_path / 'f'}', which is a file, not a directory" in line


@pytest.mark.parametrize("where", ["store", "missing parent"])
def test_read_only_store_that_must_train_is_refused_before_training(
    tmp_path: Path, where: str
) -> None:
    locked = tmp_path / "locked"
    locked.mkdir()
    store = locked if where == "store" else locked / "missing" / "runs"
    line = _one_line(_cli([*RUN, "--store", str(store)], read_only=locked))
    assert re.fullmatch(
        rf"faultbench: error: record store '{re.escape(str(store))}' cannot take new records "
        r"\((Read-only file system|Permission denied)\); expected a directory this user can "
        r"create and write, or --store DIR / \$FAULTBENCH_STORE pointing at one",
        line,
    ), line
    assert _records(locked) == []


def test_read_only_store_holding_every_run_still_scores(
    digits_grid: dict, shared_store_root: Path, tmp_path: Path
) -> None:
    store = tmp_path / "runs"  # a copy of the runs RUN scores: other workers write the shared one
    shared, copy = Store(shared_store_root), Store(store)
    for record in digits_grid.values():
        if record.spec.seed == 0:
            shutil.copytree(shared.spec_dir(record.spec), copy.spec_dir(record.spec))
    before = _records(store)
    writable = _cli([*RUN, "--store", str(store)])
    read_only = _cli([*RUN, "--store", str(store)], read_only=store)
    assert read_only.returncode == 0, read_only.stderr
    assert json.loads(read_only.stdout) == json.loads(writable.stdout)
    assert json.loads(read_only.stdout)["trained"] == 0
    assert _records(store) == before


def test_evaluate_refuses_a_file_store_before_training(tmp_path: Path) -> None:
    path = tmp_path / "file"
    path.write_text("")
    with pytest.raises(FaultbenchError, match=re.escape(f"record store '{path}' is a file")):
        evaluate("always-healthy", "digits", seeds=1, store=Store(path))
