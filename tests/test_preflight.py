"""Preflight: six gates on one step; each fault fails the gate where its bug lives."""

from __future__ import annotations

import math
import re

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from conftest import CLASSIFIER_FAULTS
from faultbench.cli.main import main
from faultbench.core.errors import FaultbenchError
from faultbench.faults.fault import condition
from faultbench.tasks.task import get_task
from faultbench.tools.preflight import BREAKS, PHASES, Pilot, pilot_for_task, preflight

# The gate each fault must fail on one step; faults absent here show only over a
# whole run (accumulation, instability, capacity, label maps, slow loaders).
EXPECTED_FAILS = {
    "huge_inputs": ["forward_loss"],
    "softmax_before_loss": ["forward_loss"],
    "dead_units": ["backward"],
    "frozen_layer": ["update"],
}


def test_healthy_digits_passes_all_six_gates() -> None:
    report = preflight(pilot_for_task("digits"))
    assert [p.phase for p in report.phases] == list(PHASES)
    assert report.passed and report.failed == []
    task = get_task("digits")
    assert report.examples_per_update == task.defaults.batch_size
    assert report.updates_per_epoch == len(task.y_train) // task.defaults.batch_size
    for phase in report.phases:
        assert phase.peak_rss_mib is not None and phase.peak_rss_mib > 0
        assert phase.seconds >= 0
        assert phase.cuda_max_allocated_mib is None  # CPU run: no CUDA numbers made up
    forward = report.phases[1].detail
    loss = float(re.search(r"loss ([0-9.]+)", forward).group(1))  # type: ignore[union-attr]
    assert abs(loss - math.log(task.n_classes)) < 0.5


@pytest.mark.parametrize("fault", CLASSIFIER_FAULTS)
def test_each_fault_fails_its_gate_and_only_it(fault: str) -> None:
    report = preflight(pilot_for_task("digits", condition(fault)))
    assert report.failed == EXPECTED_FAILS.get(fault, [])


def test_failed_gates_name_the_culprit() -> None:
    frozen = preflight(pilot_for_task("digits", condition("frozen_layer")))
    assert "hidden.weight did not change (not in the optimizer)" in frozen.phases[3].detail
    dead = preflight(pilot_for_task("digits", condition("dead_units")))
    assert "hidden.weight: 58/64 units without gradient" in dead.phases[2].detail


@pytest.mark.parametrize("how", BREAKS)
def test_broken_checkpoint_fails_resume(how: str) -> None:
    report = preflight(pilot_for_task("digits"), break_checkpoint=how)
    assert report.failed == ["resume"]
    assert "reload failed" in report.phases[-1].detail


def test_resume_reloads_in_a_new_process_and_matches() -> None:
    report = preflight(pilot_for_task("synthetic", seed=3), seed=3)
    resume = report.phases[-1]
    assert resume.passed, resume.detail
    assert "new process" in resume.detail and "step 1" in resume.detail


class _TwoHeads(nn.Module):
    """A user's model with a branch the loss never reaches."""

    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Linear(4, 3)
        self.unused = nn.Linear(4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)


def _user_pilot(model: nn.Module | None = None, **changes: object) -> Pilot:
    gen = torch.Generator().manual_seed(0)
    model = model or nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 3))
    fields: dict[str, object] = {
        "model": model,
        "loss_fn": F.cross_entropy,
        "optimizer": torch.optim.SGD(model.parameters(), lr=0.1),
        "X_train": torch.randn(60, 4, generator=gen),
        "y_train": torch.arange(60) % 3,
        "X_val": torch.randn(30, 4, generator=gen),
        "y_val": torch.arange(30) % 3,
        "batch_size": 8,
    }
    fields.update(changes)
    return Pilot(**fields)  # type: ignore[arg-type]


def test_user_pilot_passes_and_is_left_untouched() -> None:
    pilot = _user_pilot(accumulation_steps=2, data_replicas=3)
    before = [p.detach().clone() for p in pilot.model.parameters()]
    report = preflight(pilot)
    assert report.passed, str(report)
    assert report.examples_per_update == 8 * 2 * 3
    assert report.updates_per_epoch == 60 // 48
    assert all(torch.equal(a, b) for a, b in zip(before, pilot.model.parameters(), strict=True))


def test_user_model_with_a_dead_branch_fails_backward() -> None:
    report = preflight(_user_pilot(_TwoHeads()))
    assert report.failed == ["backward", "update"]
    assert "unused.weight: no gradient" in report.phases[2].detail


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"y_train": torch.arange(60) % 2, "n_classes": 3}, "classes [2] absent from training"),
        ({"y_val": torch.arange(30) % 4, "n_classes": 3}, "val targets span 0..3; expected 0..2"),
        (
            {"X_val": torch.randn(60, 4, generator=torch.Generator().manual_seed(0))[:30]},
            "30 validation rows also in training",
        ),
        ({"mask": torch.zeros(60, 4)}, "60 examples with an all-zero mask"),
        ({"accumulation_steps": 8}, "64 examples per update exceed the 60 training examples"),
    ],
)
def test_bad_data_fails_the_data_gate(changes: dict[str, object], message: str) -> None:
    report = preflight(_user_pilot(**changes))  # type: ignore[arg-type]
    assert "data" in report.failed
    assert message in report.phases[0].detail


def test_unknown_break_names_the_nearest() -> None:
    with pytest.raises(
        FaultbenchError,
        match=re.escape("Unknown checkpoint break 'trunc'. Did you mean 'truncate'?"),
    ):
        preflight(pilot_for_task("digits"), break_checkpoint="trunc")


def test_cli_healthy_prints_six_passing_rows(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["preflight", "--task", "digits"]) == 0
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if line.split()[:1] and line.split()[0] in PHASES]
    assert [r.split()[0] for r in rows] == list(PHASES)
    assert all("pass" in r.split() and "FAIL" not in r.split() for r in rows)
    assert "examples per update: 32" in out and "verdict: all gates pass" in out


@pytest.mark.parametrize(
    ("argv", "gate"),
    [(["--fault", "frozen_layer"], "update"), (["--break-checkpoint", "truncate"], "resume")],
)
def test_cli_failing_gate_exits_1(
    argv: list[str], gate: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["preflight", "--task", "digits", *argv]) == 1
    assert f"verdict: FAILED: {gate}" in capsys.readouterr().out


def test_cli_unknown_fault_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["preflight", "--fault", "frozn_layer"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "Unknown fault 'frozn_layer'. Did you mean 'frozen_layer'?" in err[0]
