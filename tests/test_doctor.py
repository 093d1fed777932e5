"""The doctor: a diagnosis with evidence, and a checklist that measures or says why not."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from faultbench import Monitor, Probe
from faultbench.cli.main import main
from faultbench.core.errors import FaultbenchError
from faultbench.faults.fault import condition_names
from faultbench.scoring.diagnosis import Diagnosis
from faultbench.scoring.evaluate import run_for
from faultbench.scoring.run import Run
from faultbench.storage.records import RunRecord
from faultbench.tasks.task import get_task
from faultbench.tools.doctor import (
    FAIL,
    NO_PROBE_NOTE,
    PASS,
    UNMEASURED,
    diagnose_monitor,
    doctor,
)

Grid = dict[tuple[str, int], RunRecord]


class Recorder:
    """A diagnoser that keeps the run it was handed and answers a fixed label."""

    name = "recorder"
    tuned_on: frozenset[str] | set[str] = frozenset()

    def __init__(self, label: str = "healthy") -> None:
        self.label = label
        self.seen: Run | None = None

    def diagnose(self, run: Run) -> Diagnosis:
        self.seen = run
        return Diagnosis(self.label, 0.5, {"steps_seen": run.trace.steps})


def _run(grid: Grid, name: str, seed: int = 0) -> Run:
    return run_for(grid[(name, seed)], get_task("digits"))


def _verdicts(report: object) -> dict[str, str]:
    return {c.name: c.verdict for c in report.checks}  # type: ignore[attr-defined]


@pytest.mark.parametrize("name", condition_names())
def test_checklist_reads_the_run(digits_grid: Grid, name: str) -> None:
    run = _run(digits_grid, name)
    report = doctor(run, Recorder())
    checks = {c.name: c for c in report.checks}
    assert len(checks) == 5
    val = run.trace.val_acc
    assert checks["validation improves"].measured == f"{val[0]:.3f} -> {val[-1]:.3f}"
    assert checks["validation improves"].verdict == (PASS if val[-1] > val[0] else FAIL)
    share = run.trace.wait_share
    assert checks["data wait is low"].verdict == (PASS if share < 0.5 else FAIL)
    assert checks["memory ran out after cheaper fixes"].verdict.startswith(UNMEASURED)
    if not torch.cuda.is_available():
        assert checks["accelerator is busy"].verdict == f"{UNMEASURED}: no accelerator"
    assert report.upgrade != "yes"  # the memory question is never answered by the trace


def test_starved_loader_fails_the_wait_line_and_blocks_the_upgrade(digits_grid: Grid) -> None:
    report = doctor(_run(digits_grid, "starved_loader"), Recorder(), oom_after_cheap_fixes=True)
    assert _verdicts(report)["data wait is low"] == FAIL
    assert report.upgrade == "no"
    assert "bigger machine: no" in str(report)


def test_label_mismatch_fails_validation(digits_grid: Grid) -> None:
    assert (
        _verdicts(doctor(_run(digits_grid, "label_mismatch"), Recorder()))["validation improves"]
        == FAIL
    )


def test_memorization_uses_the_probe_and_counts_its_steps(digits_grid: Grid) -> None:
    run = _run(digits_grid, "healthy")
    report = doctor(run, Recorder())
    memorize = next(c for c in report.checks if c.name == "memorizes a small batch")
    assert memorize.verdict == PASS
    steps = int(re.match(r"100% after (\d+) steps", memorize.measured).group(1))  # type: ignore[union-attr]
    assert run.probe is not None and run.probe.steps_used == steps


@pytest.mark.parametrize(("answer", "verdict"), [(True, PASS), (False, FAIL)])
def test_memory_answer_is_taken_from_the_user(
    digits_grid: Grid, answer: bool, verdict: str
) -> None:
    report = doctor(_run(digits_grid, "healthy"), Recorder(), oom_after_cheap_fixes=answer)
    assert _verdicts(report)["memory ran out after cheaper fixes"] == verdict


def test_without_a_probe_only_passive_checks_run(digits_grid: Grid) -> None:
    run = dataclasses.replace(_run(digits_grid, "healthy"), probe=None)
    report = doctor(run, Recorder())
    assert report.passive_only
    assert report.diagnosis.evidence["probe"] == NO_PROBE_NOTE
    assert _verdicts(report)["memorizes a small batch"] == f"{UNMEASURED}: no probe"
    assert f"note: {NO_PROBE_NOTE}" in str(report)


def _monitored_loop(steps: int) -> tuple[Monitor, nn.Module]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(5, 8), nn.ReLU(), nn.Linear(8, 3))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    monitor = Monitor(model, optimizer)
    X, y = torch.randn(64, 5), torch.arange(64) % 3
    batches = [(X[i : i + 16], y[i : i + 16]) for i in range(0, 64, 16)] * 5
    for xb, yb in monitor.batches(batches[:steps]):
        optimizer.zero_grad()
        loss = F.cross_entropy(model(xb), yb)
        loss.backward()
        optimizer.step()
        monitor.step(loss)
    return monitor, model


def test_diagnose_monitor_hands_the_monitored_run_over() -> None:
    monitor, _ = _monitored_loop(12)
    recorder = Recorder("huge_inputs")
    answer = diagnose_monitor(monitor, recorder)
    assert answer.label == "huge_inputs"
    assert recorder.seen is not None and recorder.seen.trace.steps == 12
    assert recorder.seen.config.layer_widths == (5, 8, 3)
    assert recorder.seen.probe is None and answer.evidence["probe"] == NO_PROBE_NOTE


def test_monitor_with_a_user_probe() -> None:
    monitor, _ = _monitored_loop(8)
    calls = []

    def loss_fn(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        calls.append(len(y))
        return F.cross_entropy(out, y)

    factory = lambda: nn.Sequential(nn.Linear(5, 8), nn.ReLU(), nn.Linear(8, 3))  # noqa: E731
    probe = Probe.from_user(factory, loss_fn, torch.randn(20, 5), torch.arange(20) % 3)
    report = doctor(monitor, Recorder(), probe=probe)
    assert not report.passive_only
    assert probe.steps_used == len(calls) > 0 and set(calls) == {16}
    assert "note:" not in str(report)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (
            lambda: doctor("run.json"),  # type: ignore[arg-type]
            "doctor() needs a Monitor or a Run; got str",
        ),
        (
            lambda: diagnose_monitor(_monitored_loop(0)[0], Recorder()),
            "the monitor recorded 0 steps",
        ),
        (
            lambda: diagnose_monitor(_monitored_loop(2)[0], "rulez"),
            "Unknown diagnoser 'rulez'. Did you mean 'rules'?",
        ),
        (
            lambda: Probe.from_user(
                nn.Linear(2, 2), F.cross_entropy, torch.zeros(2, 2), torch.zeros(2)
            ),
            "make_model must be a function that builds a fresh model; got Linear",
        ),
        (
            lambda: Probe.from_user(
                lambda: nn.Linear(2, 2), F.cross_entropy, torch.zeros(3, 2), torch.zeros(2)
            ),
            "X has 3 examples but y has 2; expected equal lengths",
        ),
    ],
)
def test_bad_input_is_one_clear_error(call: object, message: str) -> None:
    with pytest.raises(FaultbenchError, match=re.escape(message)):
        call()  # type: ignore[operator]


class SaysStarved(Recorder):
    """A stand-in that always names a fault (for the exit status)."""

    def __init__(self) -> None:
        super().__init__("starved_loader")


@pytest.mark.parametrize(("diagnoser", "status"), [("Recorder", 0), ("SaysStarved", 1)])
def test_cli_doctor_exits_1_when_a_fault_is_named(
    digits_grid: Grid,
    shared_store_root: Path,
    diagnoser: str,
    status: int,
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["doctor", "--diagnoser", f"{__name__}:{diagnoser}", "--store", str(shared_store_root)]
    assert main(argv) == status
    out = capsys.readouterr().out
    assert "run: task digits, condition healthy, seed 0" in out
    assert "upgrade checklist" in out and "data wait is low" in out


def test_cli_doctor_with_rules_names_huge_inputs(
    digits_grid: Grid, shared_store_root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["doctor", "--fault", "huge_inputs", "--store", str(shared_store_root)]
    assert main(argv) == 1
    out = capsys.readouterr().out
    assert re.search(r"^diagnosis: huge_inputs\b", out, re.M), out
    assert "fix 'huge_inputs' first" in out


def test_cli_doctor_no_probe_says_so(
    digits_grid: Grid, shared_store_root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["doctor", "--no-probe", "--store", str(shared_store_root)]
    main(argv)
    assert f"note: {NO_PROBE_NOTE}" in capsys.readouterr().out


def test_cli_doctor_unknown_fault_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["doctor", "--fault", "huge_input"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "Unknown fault 'huge_input'. Did you mean 'huge_inputs'?" in err[0]
