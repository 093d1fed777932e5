"""Scoring a diagnoser on the real-bug suite (faultbench.tools.realbugs)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import faultbench.scoring.evaluate as evaluate_module
import faultbench.tools.realbugs as realbugs
from faultbench.core.errors import FaultbenchError
from faultbench.realbugs import get_case
from faultbench.realbugs.storage import ensure, run_of
from faultbench.scoring import scores
from faultbench.scoring.diagnosis import Diagnosis, diagnoser_names, get_diagnoser
from faultbench.scoring.run import Run
from faultbench.storage.store import Store
from faultbench.tools import doctor
from faultbench.tools.realbugs import (
    FAILED,
    check_not_tuned_on_suite,
    evaluate_realbugs,
    evaluate_suite,
)
from faultbench.training.engine import LocalEngine

ZERO_GRAD = "aihwkit_simple_layer_zero_grad"  # missing_zero_grad, a regression (no accuracy)
XOR = "forum_xor_without_activation"  # other_fault, with validation accuracy
CHEAP = [ZERO_GRAD, XOR]


class SaysZeroGrad:
    """Answers missing_zero_grad on every run (importable, so a worker can run it)."""

    name = "says-zero-grad"
    tuned_on: frozenset[str] = frozenset()

    def diagnose(self, run: Run) -> Diagnosis:
        return Diagnosis("missing_zero_grad", evidence={"steps": run.trace.steps})


class TunedOnSuite(SaysZeroGrad):
    name = "tuned-on-suite"
    tuned_on = frozenset({"digits", "realbugs"})


@pytest.fixture
def store(tmp_path: Path) -> Store:
    return Store(tmp_path / "store")


def test_a_diagnoser_tuned_on_the_suite_is_refused_in_one_line(store: Store) -> None:
    expected = (
        "diagnoser 'tuned-on-suite' declares tuned_on ['digits', 'realbugs'], which names "
        "'realbugs': the real-bug suite is a test set, and no diagnoser may be tuned on it; "
        "expected tuned_on without it"
    )
    with pytest.raises(FaultbenchError) as caught:
        check_not_tuned_on_suite(TunedOnSuite())
    assert str(caught.value) == expected and "\n" not in expected
    with pytest.raises(FaultbenchError, match="is a test set"):
        evaluate_realbugs(TunedOnSuite(), case_names=CHEAP, store=store, progress=False)
    assert not list(store.root.glob("**/*.json")), "refused before training anything"


@pytest.mark.parametrize("name", diagnoser_names())
def test_no_shipped_diagnoser_is_tuned_on_the_suite(name: str) -> None:
    check_not_tuned_on_suite(get_diagnoser(name))


def test_each_answer_is_scored_against_its_form(store: Store) -> None:
    report = evaluate_realbugs(
        SaysZeroGrad(), case_names=CHEAP, store=store, isolate=False, progress=False
    )
    assert [(r.case, r.form, r.truth, r.correct) for r in report.results] == [
        (ZERO_GRAD, "faulty", "missing_zero_grad", True),
        (ZERO_GRAD, "fixed", "healthy", False),
        (XOR, "faulty", "other_fault", False),
        (XOR, "fixed", "healthy", False),
    ]
    s = report.scores
    assert (s["identification"]["accuracy"]["hits"], s["identification"]["accuracy"]["n"]) == (1, 1)
    assert (s["detection"]["not_healthy"]["hits"], s["detection"]["not_healthy"]["n"]) == (1, 1)
    assert s["detection"]["other_fault"]["hits"] == 0
    assert (s["false_alarms"]["hits"], s["false_alarms"]["n"]) == (2, 2)
    expected = scores.wilson(2, 2)
    low, high = s["false_alarms"]["low"], s["false_alarms"]["high"]
    assert (low, high) == pytest.approx((expected.low, expected.high))
    assert report.trained == 4 and report.results[0].evidence == {"steps": 500}
    frame = report.scored_frame()
    assert list(frame.columns) == list(scores.COLUMNS)
    assert list(frame["kind"]) == [scores.KNOWN, scores.HEALTHY, scores.HELDOUT, scores.HEALTHY]
    assert set(frame["task"]) == {"realbugs"}


def test_a_diagnoser_that_does_not_ship_answers_from_a_worker(store: Store) -> None:
    here = evaluate_realbugs(
        SaysZeroGrad(), case_names=CHEAP, store=store, isolate=False, progress=False
    )
    there = evaluate_realbugs(
        f"{__name__}:SaysZeroGrad", case_names=CHEAP, store=store, progress=False
    )
    assert [(r.predicted, r.status) for r in there.results] == [
        (r.predicted, r.status) for r in here.results
    ]
    assert there.trained == 0


def test_a_raising_diagnoser_fails_each_run_and_the_doctor_has_no_headline(
    store: Store,
) -> None:
    report = evaluate_realbugs(
        "bad_diagnosers:Raising", case_names=[XOR], store=store, isolate=False, progress=False
    )
    assert {r.status for r in report.results} == {"error"}
    assert {r.headline_class for r in report.results} == {FAILED}
    assert "boom" in report.results[0].message


def test_a_warm_evaluation_trains_and_diagnoses_nothing(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    cold = evaluate_realbugs("always-healthy", case_names=CHEAP, store=store, progress=False)
    assert cold.trained == 4

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("a warm evaluation diagnosed or probed again")

    monkeypatch.setattr(evaluate_module, "diagnose_safely", refuse)  # the one evaluate's
    monkeypatch.setattr(realbugs.doctor, "memorize_check", refuse)
    warm = evaluate_realbugs("always-healthy", case_names=CHEAP, store=store, progress=False)
    assert warm.trained == 0
    assert warm.answers_frame().equals(cold.answers_frame())


def test_the_suite_diagnosed_ahead_on_workers_gives_the_answers_of_one_process(
    tmp_path: Path, pool: LocalEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    names = ["rules", "thedeepchecker", "always-healthy"]
    here = evaluate_suite(names, case_names=CHEAP, store=tmp_path / "here", progress=False)

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("the workers left an answer for this process to diagnose")

    monkeypatch.setattr(
        evaluate_module, "diagnose_safely", refuse
    )  # the one evaluate's  # every answer from a worker
    ahead = evaluate_suite(
        names, case_names=CHEAP, store=tmp_path / "ahead", engine=pool, progress=False
    )
    assert [r.diagnoser for r in ahead] == names
    for mine, theirs in zip(here, ahead, strict=True):
        assert len(theirs.results) == 2 * len(CHEAP)
        assert [(r.case, r.form, r.predicted, r.status) for r in theirs.results] == [
            (r.case, r.form, r.predicted, r.status) for r in mine.results
        ]


def test_the_headline_is_the_doctors_on_the_same_run(store: Store) -> None:
    """Each headline is what ``faultbench.tools.doctor.doctor`` says on the stored run."""
    report = evaluate_realbugs("always-healthy", case_names=CHEAP, store=store, progress=False)
    records = {(i.case.name, i.form): i.record for i in ensure([get_case(n) for n in CHEAP], store)}
    for r in report.results:
        direct = doctor.doctor(run_of(records[r.case, r.form]), "always-healthy")
        assert r.headline == direct.verdict, (r.case, r.form)
    right = report.scores["doctor"]["right"]
    assert right["n"] == 4 and right["hits"] == sum(r.headline_correct for r in report.results)


def test_report_prints_and_serializes(store: Store) -> None:
    report = evaluate_realbugs(
        SaysZeroGrad(), case_names=CHEAP, store=store, isolate=False, progress=False
    )
    text = str(report)
    assert ZERO_GRAD in text and XOR in text
    assert "✓ missing_zero_grad" in text and "identification (known-label cases):   1.000" in text
    data = json.loads(json.dumps(report.to_dict(), allow_nan=False))
    assert data["cases"] == 2 and len(data["runs"]) == 4 and data["task"] == "realbugs"


def test_an_unknown_case_is_refused_with_the_nearest_name(store: Store) -> None:
    with pytest.raises(FaultbenchError, match=XOR):
        evaluate_realbugs("always-healthy", case_names=[XOR + "s"], store=store, progress=False)
