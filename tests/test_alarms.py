"""Calibrating the doctor's budget on a few stored healthy drawn runs: every statistic is
read off each run at each sampling, per kind where it says so, and equals an independent
computation from the trace."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch

from faultbench.scoring.budget import ANY_KIND, DIGITS, judge
from faultbench.storage.store import Store
from faultbench.tasks.task import get_task
from faultbench.tools import alarms
from faultbench.training.engine import SerialEngine

SEEDS = range(2)


@pytest.fixture(autouse=True)
def _one_thread() -> Iterator[None]:
    before = torch.get_num_threads()
    torch.set_num_threads(1)  # probes of tiny models: more threads only wait for each other
    yield
    torch.set_num_threads(before)


def _stored(values: list[float]) -> tuple[float, ...]:
    return tuple(sorted(float(f"{v:.{DIGITS}g}") for v in values))


@pytest.fixture(scope="module")
def calibrated(
    shared_store_root: Path, trainer: SerialEngine
) -> tuple[dict[tuple[str, str], object], list]:
    store, task = Store(shared_store_root), get_task("digits")
    found = alarms.calibrate_alarms(tasks=[task], store=store, engine=trainer, seeds=SEEDS)
    runs = alarms.healthy_runs(task, store=store, seeds=SEEDS)  # read back: nothing trains
    return {(c.check, c.kind): c for c in found}, runs


def test_each_healthy_run_is_read_at_both_samplings(calibrated) -> None:
    found, runs = calibrated
    assert len(runs) == len(SEEDS) * len(alarms.SAMPLINGS)
    assert sorted(r.trace.every for r in runs) == sorted(list(alarms.SAMPLINGS) * len(SEEDS))
    assert all(len(c.healthy) == len(runs) for c in found.values())


def test_the_statistics_equal_an_independent_computation(calibrated) -> None:
    found, runs = calibrated
    first = [r.trace.loss[0] / r.config.loss_reference for r in runs]
    wait = [
        r.trace.wait_seconds.sum() / (r.trace.wait_seconds.sum() + r.trace.compute_seconds.sum())
        for r in runs
    ]
    fell = [float(np.max(r.trace.val_acc) - r.trace.val_acc[-1]) for r in runs]
    assert found[("first_loss", ANY_KIND)].healthy == _stored(first)
    assert found[("wait_share", ANY_KIND)].healthy == _stored(wait)
    assert found[("val_fell", "multiclass")].healthy == _stored(fell)
    assert found[("unmoved_layers", ANY_KIND)].healthy == (0.0,) * len(runs)


def test_a_threshold_is_the_largest_healthy_value_at_a_small_share(calibrated) -> None:
    found, runs = calibrated
    assert alarms.share() * len(runs) < 1  # no healthy run may exceed it
    for c in found.values():
        assert c.threshold == max(c.healthy) and c.allowed == 0
        assert c.code == alarms.measured_on([get_task("digits")]) != alarms.measured_on()


def test_no_statistic_is_calibrated_for_a_kind_the_runs_do_not_have(calibrated) -> None:
    found, _ = calibrated
    kinds = {kind for _, kind in found}
    assert kinds == {ANY_KIND, "multiclass"}
    # the sequence rules read what a classifier's trace never holds: no row at all
    assert not {check for check, _ in found} & {"padding_counted", "future_attention"}


def test_a_calibrated_check_judges_the_runs_it_was_measured_on_quiet(calibrated, tmp_path) -> None:
    from faultbench.scoring.budget import write_budget

    found, runs = calibrated
    path = write_budget(found.values(), tmp_path / "budget.csv")
    for stat in alarms.STATISTICS:
        assert not any(judge(stat, run, path=path).fired for run in runs), stat.name


def test_the_budget_is_measured_on_every_tuned_on_task_at_once(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from faultbench.cli.main import main

    assert main(["calibrate", "--what", "alarms", "--task", "digits"]) == 2
    err = capsys.readouterr().err
    assert "--what alarms with --task digits: the budget is measured on every task" in err
    assert [t.name for t in alarms.tuned_on()] == sorted(alarms.doctor.DoctorDiagnoser.tuned_on)
