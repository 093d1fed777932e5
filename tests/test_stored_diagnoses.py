"""Stored diagnoses: a shipped diagnoser asked for by name answers once per run and code."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

import faultbench.scoring.evaluate
from faultbench.diagnosers.rules import RulesDiagnoser
from faultbench.scoring.cache import DiagnosisCache
from faultbench.scoring.diagnosis import get_diagnoser
from faultbench.scoring.evaluate import Report, evaluate
from faultbench.scoring.harness import Outcome
from faultbench.storage.store import Store

GRID = {"seeds": 1, "grid": "classic", "faults": ["lr_too_high", "dead_units"], "progress": False}


def _score(store: Path, diagnoser: object = "rules") -> Report:
    return evaluate(diagnoser, "digits", store=store, **GRID)  # type: ignore[arg-type]


def _refuse(self: object, run: object) -> object:
    raise AssertionError("asked again for a diagnosis that is stored")


def test_a_stored_answer_is_read_back_instead_of_asking_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = _score(tmp_path)
    assert {r.status for r in first.results} == {"ok"} and len(first.results) == 3
    monkeypatch.setattr(RulesDiagnoser, "diagnose", _refuse)
    again = _score(tmp_path)
    assert again.results == first.results  # answers, evidence and measured seconds alike
    assert again.scores == first.scores


def test_new_code_asks_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _score(tmp_path)
    monkeypatch.setattr(faultbench.scoring.evaluate, "diagnosis_code", lambda: "edited")
    monkeypatch.setattr(RulesDiagnoser, "diagnose", _refuse)
    again = _score(tmp_path)
    assert {r.status for r in again.results} == {"error"}
    assert all("asked again" in r.message for r in again.results)


def test_a_diagnoser_object_is_always_asked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # An object may carry settings or state that no key can see: never stored.
    _score(tmp_path, get_diagnoser("rules"))
    calls = []
    real = RulesDiagnoser.diagnose

    def counted(self: RulesDiagnoser, run: object) -> object:
        calls.append(run)
        return real(self, run)  # type: ignore[arg-type]

    monkeypatch.setattr(RulesDiagnoser, "diagnose", counted)
    _score(tmp_path, get_diagnoser("rules"))
    assert len(calls) == 3


@pytest.mark.parametrize("status", ["timeout", "crashed"])
def test_answers_that_depend_on_the_clock_are_not_stored(tmp_path: Path, status: str) -> None:
    _score(tmp_path)
    store = Store(tmp_path)
    record = next(r for r in store.records() if r.spec.condition.name == "dead_units")
    cache = DiagnosisCache(store, "rules", "some-code")
    cache.save(record, Outcome(status, "unknown", message="ran past 1 s", seconds=1.0))
    assert cache.load(record) is None
    kept = dataclasses.replace(Outcome("ok", "dead_units", 0.9, {"share": 0.5}), seconds=0.25)
    cache.save(record, kept)
    assert cache.load(record) == kept
