"""cockpit-live: Cockpit in the run's own loop sees the loop's bugs the replay cannot."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from faultbench.diagnosers._tools import symptom_table
from faultbench.diagnosers.cockpit_live import (
    INSTRUMENT,
    SYMPTOMS,
    CockpitInstrument,
    CockpitLiveDiagnoser,
    cockpit_output,
)
from faultbench.diagnosers.cockpit_tool import CockpitDiagnoser
from faultbench.faults.family import draw_design
from faultbench.faults.fault import base_setup, condition
from faultbench.scoring.diagnosis import get_diagnoser, instruments_of
from faultbench.scoring.harness import diagnose_safely, run_for
from faultbench.scoring.run import Run
from faultbench.storage.records import RunRecord, RunSpec
from faultbench.storage.runner import make_job, train_record
from faultbench.tasks.task import get_task
from faultbench.training.instruments import reference
from faultbench.training.loop import train

LOOP_FAULTS = ("missing_zero_grad", "frozen_layer", "frozen_layer.requires_grad")


def _record(fault: str, *, live: bool) -> RunRecord:
    task = get_task("digits")
    spec = RunSpec(task.name, task.fingerprint, condition(fault), 0)
    if live:
        spec = spec.with_instruments((reference(INSTRUMENT),))
    record = train_record(make_job(spec))
    assert record.ok, record.error
    return record


def _run(fault: str, *, live: bool) -> Run:
    return run_for(_record(fault, live=live), get_task("digits"), 1)


#: What the replay answers on each loop fault: the probe rebuilds the model, not the loop
#: (a frozen parameter of the rebuilt model gets no individual gradient: it abstains).
REPLAY = {
    "missing_zero_grad": "healthy",
    "frozen_layer": "healthy",
    "frozen_layer.requires_grad": "unknown",
}


@pytest.mark.parametrize("fault", LOOP_FAULTS)
def test_live_names_a_loop_fault_the_replay_cannot(fault: str) -> None:
    live = diagnose_safely(CockpitLiveDiagnoser(), _run(fault, live=True), timeout=120)
    replay = diagnose_safely(CockpitDiagnoser(), _run(fault, live=False), timeout=120)
    assert (live.status, replay.status) == ("ok", "ok")
    assert live.label == fault.split(".")[0], live.evidence
    assert replay.label == REPLAY[fault], replay.evidence


def test_live_calls_a_healthy_run_healthy_and_shows_the_missing_zero_grad_growth() -> None:
    healthy = _run("healthy", live=True)
    outcome = diagnose_safely(CockpitLiveDiagnoser(), healthy, timeout=120)
    assert outcome.label == "healthy", outcome.evidence
    grown = diagnose_safely(CockpitLiveDiagnoser(), _run("missing_zero_grad", live=True))
    assert grown.evidence["decided_by"] == "gradient_grows"
    assert (
        grown.evidence["numbers"]["grad_growth"] > 10 * outcome.evidence["numbers"]["grad_growth"]
    )


def test_cockpit_saw_the_run_as_it_ran() -> None:
    """On a drawn base with dropout and batch normalization, Cockpit's Loss at each tracked
    step is the run's own loss, bit for bit, and its GradNorm with zero_grad missing is the
    norm of the gradient the loop accumulated (the Monitor's, read the same way)."""
    task = get_task("digits")
    recipe = base_setup(task, 4, draw_design(task, 4, 0)).replace(steps=200)
    result = train(recipe, instruments=[CockpitInstrument()], every=1)
    assert result.trace is not None
    output = cockpit_output(result.instruments[INSTRUMENT])
    assert sorted(output) == list(range(0, 200, 10))
    assert [output[s]["Loss"] for s in sorted(output)] == [
        float(result.trace.loss[s]) for s in sorted(output)
    ]
    missing = condition("missing_zero_grad").apply(base_setup(task, 0)).replace(steps=60)
    result = train(missing, instruments=[CockpitInstrument()], every=1)
    assert result.trace is not None
    seen = result.instruments[INSTRUMENT]
    output = cockpit_output(seen)
    hidden = [i for i, name in enumerate(seen["parameters"]) if name.startswith("hidden.")]
    for step in (10, 50):
        cockpit_norm = math.sqrt(sum(output[step]["GradNorm"][i] ** 2 for i in hidden))
        assert cockpit_norm == pytest.approx(result.trace.grad_norm["hidden"][step], rel=1e-5)


def test_a_frozen_parameter_is_left_out_and_recorded() -> None:
    seen = _record("frozen_layer.requires_grad", live=True).instruments[INSTRUMENT]
    assert seen["refused"] == ["hidden.weight", "hidden.bias"]
    assert "hidden.weight" not in seen["parameters"] and not seen["error"]
    assert len(seen["output"]) == 60  # every 10th of 600 steps


def test_a_model_backpack_cannot_extend_stops_cockpit_not_the_run() -> None:
    task = get_task("digits")
    recipe = base_setup(task, 5, draw_design(task, 5, 0)).replace(steps=20)  # LayerNorm
    seen = train(recipe, instruments=[CockpitInstrument()]).instruments[INSTRUMENT]
    assert seen["error"].startswith("step 1: ") and seen["output"] == {}
    assert "layer1_norm.weight" in seen["no_batch_grad"]
    result = train(recipe, instruments=[CockpitInstrument()])
    assert result.trace is not None and np.isfinite(result.trace.loss).all()
    answer = CockpitLiveDiagnoser().diagnose(
        Run("digits", 5, result.trace, result.config, None, result.instruments)  # type: ignore[arg-type]
    )
    assert answer.label == "unknown"
    assert answer.evidence["decided_by"] == "cockpit cannot instrument this model"


def test_the_diagnoser_declares_the_instrument_and_answers_unknown_without_its_record() -> None:
    diagnoser = get_diagnoser("cockpit-live")
    assert instruments_of(diagnoser) == (reference(INSTRUMENT),)
    assert diagnoser.tuned_on == frozenset({"digits"}) and diagnoser.subset_seeds == 1  # type: ignore[attr-defined]
    plain = _run("healthy", live=False)
    assert diagnoser.diagnose(plain).label == "unknown"


def test_docs_show_the_symptom_table() -> None:
    docs = (Path(__file__).resolve().parents[1] / "docs" / "tools.md").read_text()
    assert symptom_table(SYMPTOMS) in docs
