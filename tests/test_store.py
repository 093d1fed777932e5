"""Records are written atomically, never overwritten, and a broken one is never used."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest

import faultbench.storage.runner
from faultbench.cli import main as cli
from faultbench.faults.fault import canonical_conditions
from faultbench.scoring.evaluate import evaluate
from faultbench.storage.records import SCHEMA, RunRecord, RunSpec, loads
from faultbench.storage.store import Store
from faultbench.tasks.task import get_task

ROOT = Path(__file__).resolve().parents[1]
WORKER = ROOT / "faultbench" / "scoring" / "worker.py"
INSTRUMENTS = ROOT / "faultbench" / "training" / "instruments.py"
HEALTHY = canonical_conditions(["healthy"])


def _breakers() -> dict[str, object]:
    def edit(path: Path, change) -> None:  # type: ignore[no-untyped-def]
        data = json.loads(path.read_text())
        change(data)
        path.write_text(json.dumps(data))

    return {
        "truncated": lambda p: p.write_bytes(p.read_bytes()[: p.stat().st_size // 2]),
        "garbage": lambda p: p.write_bytes(b"\x00\xff not json"),
        "old-schema": lambda p: edit(p, lambda d: d.update(schema=SCHEMA - 1)),
        "not-a-record": lambda p: p.write_text("[1, 2, 3]"),
        "bare-nan": lambda p: p.write_text(
            re.sub(r'"seconds":[^,]+', '"seconds":NaN', p.read_text())
        ),
        "missing-trace": lambda p: edit(p, lambda d: d.update(trace=None)),
        "misplaced": lambda p: edit(p, lambda d: d["spec"].update(seed=7)),
    }


@pytest.fixture
def stored(tmp_path, digits_grid):
    """A private store holding the healthy seed-0 digits run, and its file."""
    store = Store(tmp_path / "s")
    path = store.save(digits_grid[("healthy", 0)])
    return store, path


@pytest.mark.parametrize("read_first", [False, True], ids=["unread", "read-first"])
@pytest.mark.parametrize("kind", list(_breakers()))
def test_broken_record_is_skipped_and_noted_with_its_path(kind, read_first, stored):
    store, path = stored
    if read_first:  # the store remembers what it found: a file broken since is seen anew
        assert store.load(_spec_of(path)) is not None
    _breakers()[kind](path)
    assert store.load(_spec_of(path)) is None
    assert any(note.startswith(f"ignored broken record {path}:") for note in store.notes)
    assert any("trained again" in note for note in store.notes)


def test_a_record_read_again_is_a_copy_and_a_changed_file_is_read_afresh(stored):
    store, path = stored
    first = store.load(_spec_of(path))
    first.trace.loss[:] = -1.0  # a diagnoser that writes into its trace
    again = store.load(_spec_of(path))
    assert again.trace.loss.min() > 0  # the next one is given the record as stored
    assert again.attempt == first.attempt
    _breakers()["missing-trace"](path)  # the file changed since it was read
    assert store.load(_spec_of(path)) is None


def test_a_record_removed_or_replaced_since_it_was_read_is_not_given_again(stored):
    store, path = stored
    first = store.load(_spec_of(path))
    path.unlink()
    assert store.load(_spec_of(path)) is None
    store.save(replace(first, attempt=""))  # trained again: a new attempt of its own
    again = store.load(_spec_of(path))
    assert again is not None and again.attempt not in ("", first.attempt)


def _spec_of(path: Path) -> RunSpec:
    # Every file of the fixture is the healthy seed-0 digits run, whatever it now holds.
    task = get_task("digits")
    return RunSpec(task.name, task.fingerprint, HEALTHY[0], 0)


def test_broken_record_is_retrained_as_a_new_attempt_and_cli_says_so(stored, digits_grid):
    store, path = stored
    for (name, seed), record in digits_grid.items():
        if seed == 0 and name != "healthy":
            store.save(record)  # only the broken run is left to train
    _breakers()["truncated"](path)
    broken = path.read_bytes()
    proc = subprocess.run(
        [
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
            "1",
            "--engine",
            "serial",
            "--store",
            str(store.root),
            "--json",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    assert f"faultbench: note: ignored broken record {path}" in proc.stderr
    assert json.loads(proc.stdout)["trained"] == 1  # the broken one, and nothing else
    files = sorted(path.parent.glob("*.json"))
    assert len(files) == 2 and path.read_bytes() == broken  # kept, next to the new attempt
    (fresh,) = [f for f in files if f != path]
    assert Store(store.root).load(_spec_of(path)).attempt == fresh.stem


def test_attempt_is_never_overwritten(stored):
    store, path = stored
    before = path.read_bytes()
    record = RunRecord.from_dict(loads(before))
    with pytest.raises(FileExistsError):
        store.save(replace(record, seconds=123.0))  # same attempt id
    assert path.read_bytes() == before
    second = store.save(replace(record, attempt=""))  # a rerun gets a new id
    assert second != path and len(list(path.parent.glob("*.json"))) == 2


def test_save_leaves_no_partial_file_when_writing_fails(stored):
    store, path = stored
    record = store.load(_spec_of(path))
    unwritable = replace(record, attempt="", error=object())  # not JSON-serializable
    with pytest.raises(TypeError):
        store.save(unwritable)
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name]  # no .part, no half file


def test_failed_training_is_kept_and_retrained_as_a_new_attempt(tmp_path, monkeypatch):
    store = Store(tmp_path / "s")

    def broken_train(setup, record=True, **kwargs):  # type: ignore[no-untyped-def]
        raise FloatingPointError("simulated crash in the loop")

    monkeypatch.setattr(faultbench.storage.runner, "train", broken_train)
    first = evaluate("always-healthy", "digits", seeds=1, conditions=HEALTHY, store=store)
    assert first.failures == {"run-failed": 1} and first.correct == 0
    assert "FloatingPointError: simulated crash" in first.results[0].message
    monkeypatch.undo()
    second = evaluate("always-healthy", "digits", seeds=1, conditions=HEALTHY, store=store)
    assert second.failures == {} and second.correct == 1 and second.trained == 1
    assert any("1 earlier attempt(s) failed (kept)" in n for n in second.notes)
    statuses = sorted(r.status for r in store.records())
    assert statuses == ["failed", "ok"]  # the failure keeps its row


def test_nothing_loads_torch_or_pickle_unsafely():
    sources = [
        p for d in ("faultbench", "diagnosers", "datasets") for p in (ROOT / d).rglob("*.py")
    ]
    assert sources
    for path in sources:
        text = path.read_text()
        for call in re.findall(r"torch\.load\([^)]*\)", text):
            assert "weights_only=True" in call, f"{path}: {call}"
        loads = re.findall(r"\b(?:pickle|cPickle|dill|joblib)\.loads?\([^)]*\)", text)
        # The exceptions: the diagnosis worker unpickles what its own parent process sent
        # it down a private pipe (a diagnoser and the suite's run builder); an instrument's
        # own process and its parent exchange the job and its result through a temporary
        # folder only the two of them know (mode 0700), never a stored file.
        allowed = {
            WORKER: ["pickle.loads(payload)", "pickle.loads(built)", "pickle.loads(payload)"],
            INSTRUMENTS: ["pickle.loads(answer.read_bytes()", "pickle.loads(given.read_bytes()"],
        }.get(path, [])
        assert loads == allowed, path


def test_cli_help_documents_timeout_and_module_code(capsys):
    with pytest.raises(SystemExit):
        cli.main(["run", "--grid", "classic", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--timeout" in text and "seconds one diagnosis may take (default: 60)" in text
    assert "imports and runs that module" in text


def _run_cli(store: Path) -> subprocess.Popen[str]:
    argv = [
        "run",
        "--grid",
        "classic",
        "--diagnoser",
        "always-healthy",
        "--task",
        "synthetic",
        "--seeds",
        "1",
    ]
    return subprocess.Popen(
        [sys.executable, "-m", "faultbench", *argv, "--engine", "serial", "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "FAULTBENCH_STORE": str(store)},
    )


def test_two_concurrent_runs_on_one_store_give_the_report_of_one(tmp_path):
    store = tmp_path / "shared"
    first, second = _run_cli(store), _run_cli(store)  # both start on an empty store
    outputs = [proc.communicate(timeout=600) for proc in (first, second)]
    assert [p.returncode for p in (first, second)] == [0, 0], [err for _, err in outputs]
    reports = [json.loads(out) for out, _ in outputs]
    alone = _run_cli(store)  # a third, on its own, once both are done: trains nothing
    out, err = alone.communicate(timeout=600)
    assert alone.returncode == 0, err
    reference = json.loads(out)
    runs = len(canonical_conditions(task=get_task("synthetic")))
    assert reference["trained"] == 0
    assert sum(r["trained"] for r in reports) == runs  # every run trained once, by one of them
    for report in reports:
        assert report["notes"] == []  # no broken or half-written record met
        assert {k: v for k, v in report.items() if k != "trained"} == {
            k: v for k, v in reference.items() if k != "trained"
        }
    attempts = sorted(store.glob("*/*/seed-*/*/*.json"))  # not the diagnoses stored beside them
    assert len(attempts) == runs  # one attempt per run: none trained twice
    assert all(record.ok for record in Store(store).records())


def test_a_waiting_process_trains_whatever_another_lets_go_of_first(tmp_path):
    # Another process holds two runs' locks; it finishes the second first. The
    # waiting one must take that run up at once, not sit out the first.
    task = get_task("digits")
    first, second = (RunSpec(task.name, task.fingerprint, HEALTHY[0], seed) for seed in (0, 1))
    store = Store(tmp_path)
    held = {spec: store.lock(spec) for spec in (first, second)}
    assert all(lock.acquire(blocking=False) for lock in held.values())
    got: list[RunSpec] = []

    def wait_and_train() -> None:
        for spec, _, _ in faultbench.storage.runner.ensure_records(
            [first, second], task, store=store
        ):
            got.append(spec)

    waiter = threading.Thread(target=wait_and_train)
    waiter.start()
    try:
        time.sleep(2)  # it finds both runs held by another, and waits
        held[second].release()
        deadline = time.monotonic() + 60
        while not got and time.monotonic() < deadline:
            time.sleep(0.1)
        assert got == [second]  # trained while the first's lock is still held
    finally:
        held[first].release()
        waiter.join(timeout=120)
    assert got == [second, first]
