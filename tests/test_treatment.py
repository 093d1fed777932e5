"""Confirmed by treatment, on stored digits runs: each fault's fix measurably helps on its
own run, the same fix does not on the healthy run, and every probe step is counted."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from faultbench.diagnosers import _treatment, rules
from faultbench.scoring.evaluate import run_for
from faultbench.scoring.run import Run
from faultbench.storage.records import RunRecord
from faultbench.tasks.task import get_task

#: Each treated fault, and the finding its treatment reads (the frozen layer's names).
TREATED = sorted(_treatment.TREATMENTS)


@pytest.fixture(autouse=True)
def _one_thread() -> Iterator[None]:
    before = torch.get_num_threads()
    torch.set_num_threads(1)  # probes of tiny models: more threads only wait for each other
    yield
    torch.set_num_threads(before)


def _run(grid: dict[tuple[str, int], RunRecord], name: str) -> Run:
    return run_for(grid[(name, 0)], get_task("digits"))


@pytest.mark.parametrize("fault", TREATED)
def test_the_fix_helps_on_its_faults_run(digits_grid, fault: str) -> None:
    run = _run(digits_grid, fault)
    assert run.probe is not None
    tried = _treatment.treat(fault, run, rules.frozen_layer(run).evidence)
    assert tried is not None and tried.helped, tried
    assert tried.steps == run.probe.steps_used > 0  # every loss went through probe.loss
    assert tried.sentence().startswith(f"with {tried.fix} ") and tried.sentence().endswith(
        "confirmed"
    )
    if fault == "huge_inputs":  # the untrained model's loss, computed here on its own
        X, y = run.probe.train_data(_treatment.EXAMPLES)
        torch.manual_seed(0)
        model = run.probe.make_model()
        x = X.numpy().astype(np.float64)  # each pixel standardized; a constant one is 0
        mean, spread = x.mean(0), x.std(0, ddof=1)
        constant = spread <= 1e-6 * np.maximum(1.0, np.abs(mean))
        z = np.where(constant, 0.0, (x - mean) / np.where(constant, 1.0, spread))
        with torch.no_grad():
            raw = float(F.cross_entropy(model(X), y))
            scaled = float(F.cross_entropy(model(torch.from_numpy(z).float()), y))
        assert tried.before == pytest.approx(raw, rel=1e-5) and tried.after == pytest.approx(
            scaled, rel=1e-5
        )


@pytest.mark.parametrize("fault", TREATED)
def test_the_same_fix_does_not_help_a_healthy_run(digits_grid, fault: str) -> None:
    run = _run(digits_grid, "healthy")
    tried = _treatment.treat(fault, run, rules.frozen_layer(run).evidence)
    if fault in ("frozen_layer", "too_small_model"):
        assert tried is None  # nothing unmoved; no layer narrower than twice the classes
        return
    assert tried is not None and not tried.helped, tried
    assert "not confirmed" in tried.sentence()


def test_a_stored_runs_treatment_is_tried_once_and_charged_each_time(digits_grid) -> None:
    _treatment._DONE.clear()
    first, again = _run(digits_grid, "lr_too_high"), _run(digits_grid, "lr_too_high")
    tried = _treatment.treat("lr_too_high", first, {})
    assert tried is not None
    again.probe.loss = lambda *a: pytest.fail("trained a second time")  # type: ignore[method-assign,union-attr]
    assert _treatment.treat("lr_too_high", again, {}) == tried
    assert again.probe.steps_used == first.probe.steps_used == tried.steps > 0  # type: ignore[union-attr]


def test_without_a_probe_an_alarm_stands_on_its_statistic_and_says_so(digits_grid) -> None:
    run = replace(_run(digits_grid, "huge_inputs"), probe=None)
    answer = rules.RulesDiagnoser().diagnose(run)
    assert answer.label == "huge_inputs"
    said = answer.evidence["loss_at_start"]["treatment"]["said"]
    assert said == "no probe: raised on its statistic alone"
