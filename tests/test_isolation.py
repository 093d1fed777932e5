"""A diagnoser that raises, hangs, answers nonsense, stays in C, ignores signals,
segfaults or exits, and a worker that dies, cost their own runs only: the
benchmark finishes and reports them."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import bad_diagnosers as bad
import numpy as np
import psutil
import pytest

from conftest import DIGITS_CONDITIONS
from faultbench.faults.fault import canonical_conditions
from faultbench.scoring.evaluate import evaluate, run_for
from faultbench.scoring.harness import diagnose_safely
from faultbench.scoring.worker import GRACE, TERM_WAIT, DiagnosisWorker, TaskRuns
from faultbench.storage.store import Store
from faultbench.tasks.task import Task
from faultbench.training.engine import LocalEngine

TESTS = Path(__file__).parent
TWO = canonical_conditions(["healthy", "dead_units"])  # two stored runs keep this fast
ONE = TWO[:1]
START = 20.0  # seconds a fresh worker may take to start (torch import) on a loaded 2-core host

MISBEHAVING = [
    (bad.Raising, "error", "diagnose() raised RuntimeError: boom on seed 0"),
    (bad.Hanging, "timeout", "diagnose() ran past 0.5 s"),
    (bad.Nonsense, "error", "Nonsense.diagnose returned str, expected Diagnosis"),
    (bad.UnknownLabel, "error", "UnknownLabel.diagnose returned unknown label 'cosmic_rays'"),
    (bad.Exiting, "error", "diagnose() raised SystemExit: 3"),
]


@pytest.mark.parametrize("isolate", [True, False], ids=["worker", "in-process"])
@pytest.mark.parametrize(("cls", "status", "message"), MISBEHAVING)
def test_misbehaving_diagnoser_is_recorded_and_counted_wrong(
    cls, status, message, isolate, digits_grid, shared_store_root
):
    report = evaluate(
        cls(),
        "digits",
        seeds=1,
        conditions=TWO,
        store=shared_store_root,
        timeout=0.5,
        isolate=isolate,
    )
    assert report.total == 2 and report.trained == 0
    assert report.correct == 0  # a failed answer is never right, even for "healthy"
    assert report.failures == {status: 2}
    assert {r.status for r in report.results} == {status}
    assert {r.predicted for r in report.results} == {"unknown"}
    assert all(r.message == message for r in report.results), report.results[0].message


#: Diagnosers that no alarm stops, or that end their process: (class, status, message).
UNSTOPPABLE = [
    (bad.CLoop, "timeout", "diagnose() ran past 1 s and did not stop at the alarm"),
    (bad.IgnoresSignals, "timeout", "diagnose() ran past 1 s and did not stop at the alarm"),
    (bad.ExitsHard, "crashed", "diagnose() ended its worker process (exit status 3)"),
    (bad.Segfaults, "crashed", "diagnose() crashed its worker process (killed by SIGSEGV)"),
]


@pytest.mark.parametrize(("cls", "status", "message"), UNSTOPPABLE, ids=lambda v: str(v)[:20])
def test_worker_is_killed_at_the_timeout_and_the_run_is_recorded(
    cls, status, message, digits_grid, shared_store_root
):
    timeout = 1.0
    start = time.monotonic()
    report = evaluate(cls(), "digits", seeds=1, conditions=ONE, store=shared_store_root, timeout=1)
    elapsed = time.monotonic() - start
    (result,) = report.results
    assert (result.status, result.predicted, result.correct) == (status, "unknown", False)
    assert result.message.startswith(message), result.message
    assert report.failures == {status: 1}
    # The diagnosis itself ends at the limit plus the alarm's grace and SIGTERM's wait;
    # the whole evaluation adds only the worker's start.
    assert result.diagnose_seconds <= timeout + GRACE + TERM_WAIT + 1.0
    assert elapsed < timeout + GRACE + TERM_WAIT + START


def test_after_a_crash_the_next_diagnosis_gets_a_fresh_worker(digits_grid, shared_store_root):
    report = evaluate(
        bad.CrashesOnSeedZero(), "digits", seeds=3, conditions=ONE, store=shared_store_root
    )
    assert [(r.seed, r.status) for r in report.results] == [(0, "crashed"), (1, "ok"), (2, "ok")]
    assert report.correct == 2


def test_one_worker_serves_every_diagnosis_and_probe_steps_come_back(
    digits_grid, shared_store_root
):
    task = _digits()
    records = [digits_grid[("healthy", s)] for s in range(3)]
    with DiagnosisWorker(bad.Probing(), task, timeout=30) as worker:
        outcomes = [worker.diagnose(r) for r in records]
        assert worker.started == 1
    # Probing takes seed + 3 probe steps: counted in the worker, reported here.
    assert [o.probe_steps for o in outcomes] == [3, 4, 5]
    report = evaluate(bad.Probing(), "digits", seeds=3, conditions=ONE, store=shared_store_root)
    assert [r.probe_steps for r in report.results] == [3, 4, 5]


def test_one_worker_serves_the_next_suite_it_is_handed(digits_grid):
    task, record = _digits(), digits_grid[("healthy", 0)]
    with DiagnosisWorker(bad.Sampling(), None, timeout=30) as worker:
        outcomes = {}
        for every in (20, 1):
            worker.use(TaskRuns(task, every))
            outcomes[every] = worker.diagnose(record)
        assert worker.started == 1
    for every, outcome in outcomes.items():
        expected = run_for(record, task, every).trace.stat_steps
        assert outcome.evidence["steps"] == [int(s) for s in expected]
    assert len(outcomes[1].evidence["steps"]) > len(outcomes[20].evidence["steps"])


@pytest.mark.parametrize("isolate", [False, True])
def test_a_stopped_diagnosis_counts_no_probe_steps(digits_grid, shared_store_root, isolate):
    # How far it got before its limit depends on the machine, so the report
    # (probe cost, results/) must not carry it.
    report = evaluate(
        bad.ProbesUntilStopped(),
        "digits",
        seeds=1,
        conditions=ONE,
        store=shared_store_root,
        timeout=0.5,
        isolate=isolate,
    )
    assert [(r.status, r.probe_steps) for r in report.results] == [("timeout", 0)]
    assert report.mean_probe_steps == 0


def test_timeout_leaves_no_alarm_behind(digits_grid, shared_store_root):
    before = signal.getsignal(signal.SIGALRM)
    evaluate(
        bad.Hanging(),
        "digits",
        seeds=1,
        conditions=ONE,
        store=shared_store_root,
        timeout=0.3,
        isolate=False,
    )
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)
    assert signal.getsignal(signal.SIGALRM) is before
    # The next diagnoser runs normally, with no stray alarm cutting it short.
    report = evaluate(
        bad.Healthy(), "digits", seeds=1, conditions=TWO, store=shared_store_root, isolate=False
    )
    assert report.failures == {} and report.correct == 1


def test_timeout_keeps_the_callers_own_timer(digits_grid):
    run = run_for(digits_grid[("healthy", 0)], _digits())
    signal.signal(signal.SIGALRM, signal.SIG_IGN)
    signal.setitimer(signal.ITIMER_REAL, 100.0)
    try:
        outcome = diagnose_safely(bad.Hanging(), run, timeout=0.2)
        left, _ = signal.getitimer(signal.ITIMER_REAL)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, signal.SIG_DFL)
    assert outcome.status == "timeout"
    assert 90.0 < left <= 100.0


def test_timeout_is_enforced_off_the_main_thread(digits_grid):
    run = run_for(digits_grid[("healthy", 0)], _digits())
    box = {}
    thread = threading.Thread(
        target=lambda: box.update(o=diagnose_safely(bad.Hanging(), run, timeout=0.3))
    )
    thread.start()
    thread.join(30)
    assert not thread.is_alive()
    assert box["o"].status == "timeout" and box["o"].label == "unknown"


def _digits() -> Task:
    from faultbench.tasks.task import get_task

    return get_task("digits")


def _cli(*args: str, env_store: Path) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]),
        "FAULTBENCH_STORE": str(env_store),
    }
    return subprocess.run(
        [sys.executable, "-m", "faultbench", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )


@pytest.mark.parametrize(
    ("name", "status", "extra"),
    [
        ("Raising", "error", []),
        ("Nonsense", "error", []),
        ("Hanging", "timeout", ["--timeout", "0.3"]),
    ],
)
def test_cli_survives_misbehaving_diagnoser(name, status, extra, digits_grid, shared_store_root):
    proc = _cli(
        "run",
        "--grid",
        "classic",
        "--diagnoser",
        f"bad_diagnosers:{name}",
        "--task",
        "digits",
        "--seeds",
        "1",
        "--engine",
        "serial",
        "--json",
        *extra,
        env_store=shared_store_root,
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)  # a diagnoser's prints went to stderr, not into the JSON
    n = len(DIGITS_CONDITIONS)
    assert out["total"] == n and out["correct"] == 0 and out["trained"] == 0
    assert out["failures"] == {status: n}
    expected = {
        "Raising": "diagnose() raised RuntimeError: boom on seed 0",
        "Nonsense": "Nonsense.diagnose returned str, expected Diagnosis",
        "Hanging": "diagnose() ran past 0.3 s",
    }[name]
    assert {r["message"] for r in out["runs"]} == {expected}


def test_cli_prints_each_distinct_failure_with_its_count(digits_grid, shared_store_root):
    argv = [
        "run",
        "--grid",
        "classic",
        "--diagnoser",
        "bad_diagnosers:Raising",
        "--task",
        "digits",
        "--seeds",
        "2",
    ]
    proc = _cli(*argv, "--engine", "serial", env_store=shared_store_root)
    assert proc.returncode == 0, proc.stderr
    n = len(DIGITS_CONDITIONS)
    assert f"failed answers (counted wrong): error: {2 * n}" in proc.stdout
    for seed in (0, 1):
        line = f"  {n} x error: diagnose() raised RuntimeError: boom on seed {seed}"
        assert line in proc.stdout.splitlines(), proc.stdout


def test_ctrl_c_stops_a_diagnosis_stuck_in_c_and_its_worker(digits_grid, shared_store_root):
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]),
        "FAULTBENCH_STORE": str(shared_store_root),
    }
    argv = [
        "run",
        "--grid",
        "classic",
        "--diagnoser",
        "bad_diagnosers:CLoop",
        "--task",
        "digits",
        "--seeds",
        "1",
    ]
    proc = subprocess.Popen(
        [sys.executable, "-m", "faultbench", *argv, "--timeout", "600"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    cli = psutil.Process(proc.pid)
    deadline = time.monotonic() + 120
    while not cli.children() and time.monotonic() < deadline:  # wait for the worker
        time.sleep(0.2)
    workers = cli.children(recursive=True)
    assert workers, "no worker process started"
    time.sleep(3)  # well inside the first diagnosis, which never ends by itself
    proc.send_signal(signal.SIGINT)
    # Not a timing: the diagnosis alone would run 600 s. At a load of 5 on 2 cores it once
    # took more than 15 s to wind the CLI down (kill the worker, exit an interpreter holding
    # torch).
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130 and "faultbench: interrupted" in err
    _, alive = psutil.wait_procs(workers, timeout=5)
    assert not alive


class DyingTask(Task):
    """A task whose worker process dies as soon as it receives it (like an OOM kill)."""

    def __reduce__(self):  # type: ignore[no-untyped-def]
        return (os._exit, (1,))


def test_run_whose_worker_keeps_dying_is_reported_failed_not_dropped(tmp_path):
    rng = np.random.default_rng(0)
    task = DyingTask.from_arrays("dying", rng.normal(size=(40, 3)), np.arange(40) % 2)
    store = Store(tmp_path / "s")
    report = evaluate(
        "always-healthy", task, seeds=1, conditions=TWO[:1], store=store, engine=LocalEngine(1)
    )
    assert report.total == 1 and report.failures == {"run-failed": 1}
    (result,) = report.results
    assert result.status == "run-failed" and "WorkerDied: worker died 3 times" in result.message
    (record,) = store.records()  # kept in the store as a failed attempt
    assert record.status == "failed" and "WorkerDied" in record.error
