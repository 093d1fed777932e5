"""Stored diagnoses: a shipped diagnoser asked for by name answers once per run and code."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

import faultbench.scoring.evaluate
from faultbench.diagnosers.rules import RulesDiagnoser
from faultbench.scoring import cache
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
    monkeypatch.setattr(faultbench.scoring.evaluate, "code_for", lambda diagnoser: "edited")
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
    cache = DiagnosisCache(store, "rules", "some-code", 20)
    cache.save(record, Outcome(status, "unknown", message="ran past 1 s", seconds=1.0))
    assert cache.load(record) is None
    kept = dataclasses.replace(Outcome("ok", "dead_units", 0.9, {"share": 0.5}), seconds=0.25)
    cache.save(record, kept)
    assert cache.load(record) == kept


def test_the_code_key_covers_the_diagnosers_and_data_sets_but_not_the_cli() -> None:
    # The diagnosers and data sets are installed from folders of their own: an edit to a
    # rule must change the key, or the answer of the rule before it would be read back.
    import faultbench.datasets.digits
    import faultbench.diagnosers.rules
    from faultbench.scoring.cache import source_files

    files = set(source_files().values())
    assert Path(faultbench.diagnosers.rules.__file__).resolve() in files
    assert Path(faultbench.datasets.digits.__file__).resolve() in files
    assert Path(faultbench.scoring.evaluate.__file__).resolve() in files
    assert not any("cli" in p.parts or "reporting" in p.parts for p in files)
    # Which runs are asked for, where they are kept and the tools beside the benchmark
    # change no answer: editing them must not make a report diagnose everything again.
    import faultbench.faults.levels
    import faultbench.storage.store
    import faultbench.tools.bench

    for module in (faultbench.faults.levels, faultbench.storage.store, faultbench.tools.bench):
        assert Path(module.__file__ or "").resolve() not in files
    assert len(files) == len(source_files())  # no file twice under two names


def test_the_code_key_hashes_code_not_docstrings_and_comments(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Rewording a docstring of a diagnoser must not re-diagnose every stored run.
    path = tmp_path / "rule.py"
    monkeypatch.setattr(cache, "source_files", lambda: {"faultbench.diagnosers/rule.py": path})

    def key(doc: str, limit: int, comment: str) -> str:
        path.write_text(f'"""A rule{doc}."""\n\nLIMIT = {limit}  # why{comment}\n')
        cache.diagnosis_code.cache_clear()
        return cache.diagnosis_code()

    try:
        base = key("", 3, "")
        assert key(", reworded", 3, ", edited") == base
        assert key("", 44, "") != base
    finally:
        monkeypatch.undo()
        cache.diagnosis_code.cache_clear()


SHIPPED = ("rules", "doctor", "umlaut", "learned", "always-healthy", "thedeepchecker")


def _keys(monkeypatch: pytest.MonkeyPatch, edited: dict[str, Path]) -> dict[str, str]:
    """Each shipped diagnoser's answer key with the files of ``edited`` replaced."""
    files = {**cache.source_files(), **edited}
    monkeypatch.setattr(cache, "source_files", lambda: files)
    cache.diagnosis_code.cache_clear()
    try:
        return {n: cache.code_for(get_diagnoser(n)) for n in SHIPPED}
    finally:
        monkeypatch.undo()
        cache.diagnosis_code.cache_clear()


def _edited(tmp_path: Path, relative: str) -> dict[str, Path]:
    """``relative`` (a key of source_files) with one constant added: a code edit."""
    original = cache.source_files()[relative]
    copy = tmp_path / original.name
    copy.write_text(original.read_text(encoding="utf-8") + "\nEDITED_HERE = 1\n")
    return {relative: copy}


def test_editing_one_diagnosers_module_rekeys_its_answers_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = _keys(monkeypatch, {})
    after = _keys(monkeypatch, _edited(tmp_path, "faultbench.diagnosers/umlaut.py"))
    assert [n for n in SHIPPED if after[n] != before[n]] == ["umlaut"]
    # The doctor runs through the rules (it imports them): a rule's edit re-keys both.
    after = _keys(monkeypatch, _edited(tmp_path, "faultbench.diagnosers/rules.py"))
    assert [n for n in SHIPPED if after[n] != before[n]] == ["rules", "doctor"]


def test_editing_code_every_diagnosis_goes_through_rekeys_them_all(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = _keys(monkeypatch, {})
    for shared in ("faultbench/scoring/harness.py", "faultbench/scoring/run.py"):
        after = _keys(monkeypatch, _edited(tmp_path, shared))
        assert all(after[n] != before[n] for n in SHIPPED), shared


def test_a_diagnosers_files_are_its_module_and_what_it_imports() -> None:
    rules = cache.module_files("faultbench.diagnosers.rules")
    assert "faultbench.diagnosers/rules.py" in rules
    assert "faultbench.diagnosers/_treatment.py" in rules  # imported by the rules
    assert "faultbench.diagnosers/umlaut.py" not in rules
    assert "faultbench.diagnosers/__init__.py" in rules  # runs on import; its imports do not
    assert "faultbench/scoring/harness.py" in rules
    assert not any(k.startswith(("faultbench/cli/", "faultbench/reporting/")) for k in rules)


@pytest.mark.parametrize(
    "argv",
    [
        ["sweep", "--fault", "lr_too_high", "--severities", "331", "--seeds", "1"],
        ["pairs", "--seeds", "1"],
    ],
    ids=["sweep", "pairs"],
)
def test_sweep_and_pairs_read_back_the_answers_of_a_diagnoser_named(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
) -> None:
    import faultbench.reporting.pairs
    from faultbench.cli.main import main
    from faultbench.faults.fault import condition

    one_pair = [condition("lr_too_high", "dead_units")]  # of the 30-odd: one is enough here
    monkeypatch.setattr(faultbench.reporting.pairs, "pair_conditions", lambda **_: one_pair)
    command = [*argv, "--diagnoser", "rules", "--task", "digits", "--store", str(tmp_path)]
    command += ["--out", str(tmp_path / "out")]
    assert main(command) == 0
    first = capsys.readouterr().out
    monkeypatch.setattr(RulesDiagnoser, "diagnose", _refuse)
    assert main(command) == 0
    assert capsys.readouterr().out == first  # the same table, from the stored answers


def test_learned_is_not_fitted_when_every_answer_is_stored(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from faultbench.diagnosers.learned import LearnedDiagnoser

    _score(tmp_path)  # trains the grid's three runs
    # Its own training set is 100 digits runs; the grid's runs make a forest just as well here.
    own = Store(tmp_path).records()
    monkeypatch.setattr(LearnedDiagnoser, "training_records", lambda self: own)
    first = evaluate("learned", "digits", store=tmp_path, **GRID)
    assert {r.status for r in first.results} == {"ok"}
    monkeypatch.setattr(LearnedDiagnoser, "prepare", _refuse)
    monkeypatch.setattr(LearnedDiagnoser, "diagnose", _refuse)
    again = evaluate("learned", "digits", store=tmp_path, **GRID)
    assert again.results == first.results


UNTRAINED = ("healthy", "dead_units")  # the runs the report trains itself; the rest are copied


class Recording:
    """An engine that keeps what it is handed and runs nothing."""

    name = "recording"

    def __init__(self) -> None:
        self.items: list[Any] = []

    def map_unordered(self, fn, items):  # type: ignore[no-untyped-def]
        self.items = list(items)
        return iter(())

    def close(self) -> None:
        pass


def test_a_report_diagnosed_ahead_on_workers_reads_every_answer_back(
    digits_grid, tmp_path: Path, pool, monkeypatch: pytest.MonkeyPatch
) -> None:
    from faultbench.reporting.ahead import Evaluation, diagnose_ahead, train_all

    evaluations = [Evaluation("rules", "digits", "classic", 1)]
    store = Store(tmp_path)
    for (name, seed), record in digits_grid.items():  # the runs, not their answers
        if seed == 0 and name not in UNTRAINED:
            store.save(record)
    trained = train_all(evaluations, store, pool)
    diagnose_ahead(evaluations, store, pool, timeout=60, isolate=None)
    monkeypatch.setattr(RulesDiagnoser, "diagnose", _refuse)  # nothing may be asked here
    report = evaluate("rules", "digits", seeds=1, grid="classic", store=tmp_path, progress=False)
    assert report.trained == 0 and trained == len(UNTRAINED) and len(report.results) == 10
    assert {r.status for r in report.results} == {"ok"}

    again = Recording()
    diagnose_ahead(evaluations, store, again, timeout=60, isolate=None)  # type: ignore[arg-type]
    assert again.items == []  # every answer stored: no worker is handed anything
    assert train_all(evaluations, store, again) == 0  # type: ignore[arg-type]


def test_one_worker_diagnoses_a_task_and_grid_for_every_quick_diagnoser_after_the_slow_ones(
    tmp_path: Path,
) -> None:
    """rules and the doctor share the memorization probe of each run: one job holds both, at
    both samplings, so one process asks the probe once; a diagnoser scored on a subset of
    seeds (a costly probe) has a job of its own, handed out first."""
    from faultbench.reporting.ahead import Evaluation, diagnose_ahead

    quick = [Evaluation(n, "digits", "classic", 5, e) for n in ("rules", "doctor") for e in (20, 1)]
    slow = Evaluation("thedeepchecker", "digits", "classic", 1)
    engine = Recording()
    diagnose_ahead([*quick, slow], Store(tmp_path), engine, timeout=60, isolate=None)  # type: ignore[arg-type]
    assert [job.evaluations for job in engine.items] == [(slow,), tuple(quick)]


def test_answer_segments_of_several_processes_fold_into_one_table(tmp_path: Path) -> None:
    from faultbench.scoring import answers

    folder = tmp_path / answers.FOLDER / "rules" / "code1"
    outcome = Outcome("ok", "dead_units", 0.9, {"share": 0.5}, seconds=0.25)
    for writer in range(3):  # three processes' segments, one answer each
        table = answers.AnswerTable(folder, "code1")
        table.put(answers.row_of((f"key{writer}", "a1", 20, 1.0), outcome, "code1"))
        table.flush()
    assert len(list(folder.glob("*.parquet"))) == 3
    answers.compact(tmp_path / answers.FOLDER)
    assert len(list(folder.glob("*.parquet"))) == 1
    read = answers.AnswerTable(folder, "code1")
    assert sorted(index[0] for index in read.rows) == ["key0", "key1", "key2"]
    row = read.get(("key1", "a1", 20, 1.0))
    assert row is not None and Outcome(**answers.outcome_fields(row)) == dataclasses.replace(
        outcome, also=()
    )
    assert read.get(("key1", "another attempt", 20, 1.0)) is None  # made on another run


def test_a_run_answered_with_its_instrument_is_never_trained_with_it_again(
    tmp_path: Path,
) -> None:
    # TrainCheck's answers are committed as they are made: a machine that has them (here:
    # the answer tables alone, copied) trains only the plain runs, never the traced ones.
    import shutil

    from faultbench.scoring import answers

    grid = {"grid": "classic", "seeds": 1, "faults": ["lr_too_high"], "progress": False}
    first = evaluate("cockpit-live", "diabetes", store=Store(tmp_path / "a"), **grid)
    assert first.trained == 2 and {r.status for r in first.results} == {"ok"}
    shutil.copytree(tmp_path / "a" / answers.FOLDER, tmp_path / "b" / answers.FOLDER)
    again = evaluate("cockpit-live", "diabetes", store=Store(tmp_path / "b"), **grid)
    traced = [p for p in (tmp_path / "b").rglob("seed-*+*") if p.is_dir()]
    assert again.trained == 2 and traced == []  # the two plain runs, no instrumented one
    assert [(r.condition, r.predicted, r.key) for r in again.results] == [
        (r.condition, r.predicted, r.key) for r in first.results
    ]


def test_a_threshold_measured_again_rekeys_the_answers_that_read_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The doctor's budget is data (budget.csv beside budget.py): remeasured, the answers of
    # the diagnosers that read it are made again, and no other's.
    original = cache.source_files()["faultbench/scoring/budget.py"]
    copy = tmp_path / "budget.py"
    copy.write_text(original.read_text(encoding="utf-8"))
    (tmp_path / "budget.csv").write_text(original.with_name("budget.csv").read_text() + "\n")
    before = _keys(monkeypatch, {})
    after = _keys(monkeypatch, {"faultbench/scoring/budget.py": copy})
    changed = {n for n in SHIPPED if after[n] != before[n]}
    assert "doctor" in changed and "umlaut" not in changed and "always-healthy" not in changed
