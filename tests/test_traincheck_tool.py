"""traincheck: TrainCheck in the loop, in a process of its own; its answer from its check."""

from __future__ import annotations

import pytest
import torch

from faultbench.diagnosers import traincheck_tool as tt
from faultbench.faults.fault import condition
from faultbench.scoring.diagnosis import get_diagnoser, instruments_of
from faultbench.scoring.run import Run
from faultbench.storage.records import RunSpec
from faultbench.storage.runner import make_job, train_result
from faultbench.tasks.task import get_task
from faultbench.tools.checks import make_run
from faultbench.training.instruments import INSTRUMENTS, needs_own_process, reference


def _with(record: dict[str, object] | None) -> Run:
    run = make_run("healthy")
    seen = {} if record is None else {tt.INSTRUMENT: record}
    return Run(run.task, run.seed, run.trace, run.config, None, seen)


VIOLATION = {
    "relation": "APIContainRelation",
    "text": "Adam.step() always calls x()",
    "first_step": 3,
}


def test_an_invariant_violated_is_other_fault_and_none_is_healthy() -> None:
    diagnoser = tt.TrainCheckDiagnoser()
    record = {"checked": 10, "not_triggered": 2, "violated": [VIOLATION], "error": ""}
    answer = diagnoser.diagnose(_with(record))
    assert answer.label == "other_fault" and answer.evidence["violations"] == 1
    assert diagnoser.diagnose(_with({**record, "violated": []})).label == "healthy"
    assert diagnoser.diagnose(_with({**record, "error": "boom"})).label == "unknown"
    assert diagnoser.diagnose(_with(None)).label == "unknown"


def test_the_mapping_names_a_fault_only_when_every_violation_maps_to_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(tt, "MAPPING", {("APIContainRelation", "Adam.step()"): "lr_too_high"})
    assert tt.label_for([VIOLATION]) == "lr_too_high"
    other = {**VIOLATION, "relation": "FunctionLeadRelation"}
    assert tt.label_for([VIOLATION, other]) == "other_fault"
    assert tt.label_for([]) == "healthy"


def test_the_diagnoser_declares_an_instrument_that_trains_in_its_own_process() -> None:
    diagnoser = get_diagnoser("traincheck")
    assert instruments_of(diagnoser) == (reference(tt.INSTRUMENT),)
    assert diagnoser.tuned_on == frozenset({"digits"}) and diagnoser.subset_seeds == 1  # type: ignore[attr-defined]
    assert needs_own_process([INSTRUMENTS.get(tt.INSTRUMENT)])
    assert tt.INVARIANTS_FILE.exists(), "ship the invariants: tt.infer()"
    assert reference(tt.INSTRUMENT).code != ""  # the invariants' digest is part of the code


def test_a_run_is_traced_and_checked_in_its_own_process_leaving_torch_here_alone() -> None:
    wrapped_before = torch.nn.Module.zero_grad
    task = get_task("digits")
    spec = RunSpec(task.name, task.fingerprint, condition("missing_zero_grad"), 0)
    result = train_result(make_job(spec.with_instruments((reference(tt.INSTRUMENT),)), steps=30))
    seen = result.instruments[tt.INSTRUMENT]
    assert seen["error"] == "" and seen["checked"] > 100, seen.get("error")
    assert seen["trace_lines"]["API"] > 1000 and seen["trace_lines"]["VAR"] > 0
    assert seen["policy"] == {"warm_up": tt.WARM_UP, "interval": tt.INTERVAL}
    assert all(v["relation"] and v["text"] for v in seen["violated"])
    assert torch.nn.Module.zero_grad is wrapped_before  # TrainCheck wrapped torch over there
