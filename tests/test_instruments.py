"""Instruments: every shipped one leaves the run bit for bit as it was; instrumented runs are
records of their own, trained only for the diagnoser that asks and only on its runs."""

from __future__ import annotations

import functools
import hashlib
import json
import re
from collections.abc import Iterator
from dataclasses import fields
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import faultbench as fb
from faultbench.core.errors import FaultbenchError
from faultbench.faults.family import draw_design
from faultbench.faults.fault import base_setup, condition
from faultbench.faults.recipe import Recipe
from faultbench.reporting import ahead
from faultbench.scoring.diagnosis import Diagnosis, instruments_of
from faultbench.scoring.run import Run
from faultbench.storage.records import RunRecord, RunSpec, code_version
from faultbench.storage.runner import first_step_gave_up, make_job, train_result
from faultbench.storage.store import Store
from faultbench.tasks.task import get_task
from faultbench.training.instruments import (
    INSTRUMENTS,
    Instrument,
    InstrumentRef,
    build,
    finish_all,
    needs_own_process,
    reference,
)
from faultbench.training.loop import TrainResult, train

STEPS = 60  # several tracked steps of every instrument (Cockpit's every 10th, TrainCheck's 15)
TIMINGS = {"wait_seconds", "compute_seconds"}  # wall clock: the only fields allowed to differ

#: (task, condition, drawn base seed or None): the reference MLP and CNN, a loop fault the
#: instrument must see as it ran, a frozen layer its tool refuses, a drawn base with dropout
#: and batch normalization (the run's random draws and its buffers) and one with layer
#: normalization (which BackPACK cannot extend: the tool fails, the run must not).
CONDITIONS = [
    ("digits", "healthy", None),
    ("digits", "missing_zero_grad", None),
    ("digits", "frozen_layer.requires_grad", None),
    ("digits", "healthy", 4),
    ("digits", "healthy", 5),
    ("shapes", "healthy", None),
]


def _spec(task: str, fault: str, drawn: int | None) -> RunSpec:
    t = get_task(task)
    design = draw_design(t, drawn, 0) if drawn is not None else None
    return RunSpec(t.name, t.fingerprint, condition(fault), drawn or 0, design)


def _recipe(task: str, fault: str, drawn: int | None, steps: int = STEPS) -> Recipe:
    spec = _spec(task, fault, drawn)
    setup = base_setup(get_task(task), spec.seed, spec.design)
    return spec.condition.apply(setup).replace(steps=steps)


def differences(a: TrainResult, b: TrainResult) -> list[str]:
    """The trace fields (and config) in which two results differ, timings aside."""
    assert a.trace is not None and b.trace is not None
    out = [] if a.config == b.config else ["config"]
    for f in fields(a.trace):
        if f.name in TIMINGS:
            continue
        x, y = getattr(a.trace, f.name), getattr(b.trace, f.name)
        if isinstance(x, dict):
            if x.keys() != y.keys():
                out.append(f.name)
            for key in x.keys() & y.keys():
                if not _equal(x[key], y[key]):
                    out.append(f"{f.name}[{key}]")
        elif not _equal(x, y):
            out.append(f.name)
    return out


def _equal(x: Any, y: Any) -> bool:
    if isinstance(x, np.ndarray):  # bit for bit, NaN included
        return x.shape == y.shape and x.tobytes() == np.asarray(y).tobytes()
    return bool(x == y) or (x != x and y != y)


#: An instrument in a process of its own (TrainCheck) costs seconds a run to start: the
#: conditions where it could change the run (the loop fault, the run's random draws).
OWN_PROCESS_CONDITIONS = [CONDITIONS[0], CONDITIONS[1], CONDITIONS[3]]
CASES = [
    pytest.param(name, case, id=f"{name}-{'-'.join(map(str, case))}")
    for name in INSTRUMENTS.names()
    for case in (
        OWN_PROCESS_CONDITIONS if needs_own_process([INSTRUMENTS.get(name)]) else CONDITIONS
    )
]


@pytest.fixture(scope="module")
def plain() -> dict[tuple[str, str, int | None], TrainResult]:
    """Each condition trained without any instrument."""
    return {c: train(_recipe(*c)) for c in CONDITIONS}


@pytest.mark.parametrize(("name", "case"), CASES)
def test_an_instrument_leaves_the_run_bit_for_bit_as_it_was(
    name: str, case: tuple[str, str, int | None], plain: dict[Any, TrainResult]
) -> None:
    spec = _spec(*case).with_instruments((reference(name),))
    result = train_result(make_job(spec, steps=STEPS))  # in its own process if it asks
    assert differences(plain[case], result) == []
    assert set(result.instruments) == {name}
    json.dumps(result.instruments[name])  # a plain JSON record


class Rogue(Instrument):
    """Breaks both rules: draws from torch's generator and nudges a weight."""

    name = "rogue"

    def after_step(self, model, optimizer, batch, loss, step) -> None:  # type: ignore[no-untyped-def]
        torch.rand(1)
        if step == 5:
            with torch.no_grad():
                next(model.parameters()).mul_(1.0 + 1e-7)


def test_the_identity_comparison_catches_an_instrument_that_changes_the_run(
    plain: dict[Any, TrainResult],
) -> None:
    case = ("digits", "healthy", 4)  # dropout: the extra draw changes its masks
    changed = differences(plain[case], train(_recipe(*case), instruments=[Rogue()]))
    assert "loss" in changed and any(c.startswith("grad_norm") for c in changed)


class Counter(Instrument):
    """Counts the loop's moments and keeps the first loss: a minimal instrument."""

    name = "test-counter"

    def __init__(self) -> None:
        self.moments: dict[str, int] = {"start": 0, "after_backward": 0, "after_step": 0}
        self.first_loss = float("nan")
        self.grads_present = True

    def start(self, model, optimizer, loss_fn) -> None:  # type: ignore[no-untyped-def]
        self.moments["start"] += 1

    def after_backward(self, model, optimizer, batch, output, loss, step) -> None:  # type: ignore[no-untyped-def]
        self.moments["after_backward"] += 1
        self.grads_present &= all(p.grad is not None for p in model.parameters())
        if step == 1:
            self.first_loss = float(loss.detach())

    def after_step(self, model, optimizer, batch, loss, step) -> None:  # type: ignore[no-untyped-def]
        self.moments["after_step"] += 1

    def finish(self) -> dict[str, Any]:
        return {"moments": self.moments, "first_loss": self.first_loss, "grads": self.grads_present}


@pytest.fixture
def counter() -> Iterator[str]:
    """``test-counter`` registered for one test (the registry keeps no test entries)."""
    INSTRUMENTS.add(Counter.name, Counter)
    yield Counter.name
    del INSTRUMENTS._entries[Counter.name]


def test_the_loop_calls_each_moment_once_per_step(counter: str) -> None:
    result = train(_recipe("digits", "healthy", None, steps=30), instruments=[Counter()])
    seen = result.instruments[counter]
    assert seen["moments"] == {"start": 1, "after_backward": 30, "after_step": 30}
    assert seen["grads"] is True
    assert result.trace is not None and seen["first_loss"] == float(result.trace.loss[0])


class CountingDiagnoser:
    """Answers from the counter's record alone."""

    name = "counts-steps"
    tuned_on: frozenset[str] = frozenset()
    instrument = Counter.name

    def diagnose(self, run: Run) -> Diagnosis:
        seen = run.instruments[Counter.name]
        steps = seen["moments"]["after_step"]
        return Diagnosis("healthy", evidence={"steps": steps, "first_loss": seen["first_loss"]})


def test_an_instrumented_diagnoser_is_scored_through_evaluate_on_runs_of_its_own(
    counter: str, tmp_path: Path
) -> None:
    store = Store(tmp_path / "store")
    conditions = [fb.condition("healthy"), fb.condition("missing_zero_grad")]
    report = fb.evaluate(
        CountingDiagnoser(), "digits", seeds=2, conditions=conditions, store=store, isolate=False
    )
    assert report.instruments == (counter,) and report.to_dict()["instruments"] == [counter]
    assert report.trained == 4 and report.failures == {}
    assert {r.evidence["steps"] for r in report.results} == {600}
    folders = sorted(p.name for p in (tmp_path / "store" / "digits").glob("*/*"))
    assert folders == [f"seed-{s}+{counter}" for s in (0, 0, 1, 1)]  # no plain run trained
    again = fb.evaluate(
        CountingDiagnoser(), "digits", seeds=2, conditions=conditions, store=store, isolate=False
    )
    assert again.trained == 0
    # the plain runs are other records: the same seeds for a plain diagnoser train again
    plain = fb.evaluate("always-healthy", "digits", seeds=1, conditions=conditions, store=store)
    assert plain.trained == 2


def test_a_diagnosers_subset_of_seeds_is_all_that_is_planned_with_its_instrument(
    tmp_path: Path,
) -> None:
    from faultbench.scoring.board import Board
    from faultbench.scoring.contract import contract_of

    board = Board.default(["digits"])
    seeds = board.seeds_for(contract_of(fb.get_diagnoser("cockpit-live")), "classic")
    assert seeds == 1
    ev = ahead.Evaluation("cockpit-live", "digits", "classic", seeds)
    specs = ahead._specs(ev, Store(tmp_path))  # the classic grid plans without training
    assert {s.seed for s in specs} == {0} and len(specs) == 10
    assert all(s.instruments == (reference("cockpit"),) for s in specs)
    assert all(s.folder == "seed-0+cockpit" for s in specs)


def test_a_plain_run_is_keyed_as_before_and_an_instrumented_one_apart() -> None:
    task = get_task("digits")
    spec = RunSpec(task.name, task.fingerprint, condition("healthy"), 3)
    payload = {
        "task": spec.task,
        "task_fingerprint": spec.task_fingerprint,
        "condition": [],
        "seed": 3,
        "design": None,
        "code": code_version(),
        "faults": spec.condition.source_hash(),
    }
    before = hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:20]
    assert spec.key() == before and "instruments" not in spec.to_dict()
    with_it = spec.with_instruments((reference("cockpit"),))
    assert with_it.key() != spec.key() and with_it.folder == "seed-3+cockpit"
    assert RunSpec.from_dict(with_it.to_dict()) == with_it
    other = with_it.with_instruments((InstrumentRef("cockpit", "000000000000"),))
    assert other.key() != with_it.key()  # the instrument's code is in the key


def test_an_instrumented_record_keeps_its_instruments_record_in_the_store(
    tmp_path: Path,
) -> None:
    task = get_task("digits")
    spec = RunSpec(task.name, task.fingerprint, condition("healthy"), 0)
    spec = spec.with_instruments((reference("cockpit"),))
    trained = train(_recipe("digits", "healthy", None, steps=20))
    assert trained.trace is not None and trained.config is not None
    seen = {"cockpit": {"output": {"0": {"Loss": float("nan")}}, "refused": ["a.b"]}}
    record = RunRecord(spec, spec.key(), "", "ok", 1.0, trained.trace, trained.config,
                       instruments=seen)  # fmt: skip
    store = Store(tmp_path)
    store.save(record)
    back = store.load(spec)
    assert back is not None and back.instruments["cockpit"]["refused"] == ["a.b"]
    assert np.isnan(back.instruments["cockpit"]["output"]["0"]["Loss"])


def test_a_record_that_is_not_json_is_refused_with_where() -> None:
    class Leaky(Instrument):
        name = "leaky"

        def finish(self) -> dict[str, Any]:
            return {"per_step": [1.0, torch.tensor(2.0)]}

    with pytest.raises(FaultbenchError, match=re.escape("leaky.per_step[1]: Tensor is not JSON")):
        finish_all([Leaky()])
    assert finish_all([Counter()])["test-counter"]["moments"]["start"] == 0


def test_unknown_instruments_and_misnamed_ones_fail_before_training() -> None:
    class Asks:
        name = "asks"
        tuned_on: frozenset[str] = frozenset()
        instrument = "cockpitt"

        def diagnose(self, run: Run) -> Diagnosis:
            return Diagnosis("healthy")

    with pytest.raises(
        FaultbenchError, match=re.escape("Unknown instrument 'cockpitt'. Did you mean 'cockpit'")
    ):
        fb.evaluate(Asks(), "digits", seeds=1, grid="classic", isolate=False)
    with pytest.raises(FaultbenchError, match="built an object named 'test-counter'"):
        build([("other", Counter)])
    Asks.instrument = 3  # type: ignore[assignment]
    with pytest.raises(
        FaultbenchError,
        match="'instrument' must be a registered instrument's name or a tuple of names; got 3",
    ):
        instruments_of(Asks())


def test_the_report_prices_an_instrument_against_the_same_plain_runs() -> None:
    from faultbench.reporting.provenance import instrument_overhead_table
    from faultbench.scoring.evaluate import Report, RunResult

    def report(name: str, seconds: float, instruments: tuple[str, ...] = ()) -> Report:
        results = tuple(
            RunResult(seed, cond, "healthy", "ok", train_seconds=seconds * (1 + seed))
            for seed in (0, 1)
            for cond in ("healthy", "missing_zero_grad")
        )
        return Report(name, "digits", True, ("digits",), results, grid="classic",
                      instruments=instruments)  # fmt: skip

    table = instrument_overhead_table(
        [report("rules", 2.0), report("cockpit-live", 5.0, ("cockpit",))]
    )
    assert table.to_dict("records") == [
        {
            "instrument": "cockpit",
            "diagnoser": "cockpit-live",
            "task": "digits",
            "grid": "classic",
            "runs": 4,
            "train_seconds_ratio_median": "2.50",
        }
    ]


class Quitter(Instrument):
    """Sees the first step, then gives up on the run, as a tool that cannot watch its model."""

    name = "test-quitter"

    def __init__(self) -> None:
        self.steps = 0
        self.first_loss = float("nan")

    def after_backward(self, model, optimizer, batch, output, loss, step) -> None:  # type: ignore[no-untyped-def]
        if not self.gave_up():
            self.steps += 1
            self.first_loss = float(loss.detach())

    def gave_up(self) -> bool:
        return self.steps >= 1

    def finish(self) -> dict[str, Any]:
        return {"steps": self.steps, "first_loss": self.first_loss}


class QuitterDiagnoser:
    """Answers from the quitter's record alone."""

    name = "reads-the-quitter"
    tuned_on: frozenset[str] = frozenset()
    instrument = Quitter.name

    def diagnose(self, run: Run) -> Diagnosis:
        return Diagnosis("healthy", evidence=dict(run.instruments[Quitter.name]))


def test_a_run_whose_instruments_give_up_at_its_first_step_is_the_plain_run(
    tmp_path: Path,
) -> None:
    INSTRUMENTS.add(Quitter.name, Quitter)
    try:
        store = Store(tmp_path / "store")
        conditions = [fb.condition("healthy"), fb.condition("missing_zero_grad")]
        ask = functools.partial(
            fb.evaluate, seeds=2, conditions=conditions, store=store, isolate=False
        )
        report = ask(QuitterDiagnoser(), "digits")
        assert report.failures == {} and report.trained == 4  # the plain runs, trained once
        assert ask("always-healthy", "digits").trained == 0  # and read by a plain diagnoser
        for record in store.records():
            if not record.spec.instruments:
                continue
            plain = store.load(record.spec.with_instruments(()))
            assert plain is not None and record.seconds == 0.0 < plain.seconds
            assert record.trace is not None and plain.trace is not None
            assert np.array_equal(record.trace.loss, plain.trace.loss)
            seen = record.instruments[Quitter.name]
            assert seen == {"steps": 1, "first_loss": float(plain.trace.loss[0])}
    finally:
        del INSTRUMENTS._entries[Quitter.name]


@pytest.mark.parametrize("task", ["language", "numbers"])
def test_cockpit_gives_up_at_the_first_step_of_a_model_it_cannot_extend_as_it_would_in_the_run(
    task: str,
) -> None:
    pytest.importorskip("cockpit")
    t = get_task(task)
    spec = RunSpec(t.name, t.fingerprint, condition("healthy"), 0)
    job = make_job(spec.with_instruments((reference("cockpit"),)))
    given_up = first_step_gave_up(job)
    assert given_up is not None and given_up.instruments["cockpit"]["error"].startswith("step 1:")
    assert given_up.instruments == train_result(job).instruments  # the whole run's record
    digits = get_task("digits")
    watched = RunSpec(digits.name, digits.fingerprint, condition("healthy"), 0)
    assert first_step_gave_up(make_job(watched.with_instruments((reference("cockpit"),)))) is None
