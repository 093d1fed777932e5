"""A diagnoser joins the leaderboard: `faultbench score` writes its result file, `faultbench
leaderboard` assembles the files alone, and a stale, edited or forged file is refused."""

from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd
import pytest

from faultbench.cli.main import main
from faultbench.reporting import pages, resultfile
from faultbench.reporting.submission import score
from faultbench.scoring import evaluate as evaluate_module
from faultbench.scoring import worker as worker_module
from faultbench.scoring.board import Board
from faultbench.scoring.plan import plan
from faultbench.storage.records import RunRecord
from faultbench.storage.store import Store
from faultbench.tasks.task import get_task
from faultbench.training.engine import LocalEngine

CASE = "aihwkit_simple_layer_zero_grad"  # the cheapest real-bug case (~0.05 s a form)
FAULT = "frozen_layer"  # three variants without a knob: three runs on the full grid's base
HEALTHY = 2  # healthy drawn runs of the full grid: each counted once per design axis
SHIPPED = ("always-healthy", "rules-v1")  # read the trace alone: no probe to train
NEW = "my-rule"  # made by faultbench new-diagnoser
NEW_CLASS = "my_rule.diagnoser:MyRuleDiagnoser"
# The module's board: one task (its classic seed 0 is the session's digits grid), one
# fault, one run per fault cell of the full grid, and one real-bug case.
BOARD = ["--task", "digits", "--seeds", "1", "--fault-seeds", "1"]
BOARD += ["--healthy-seeds", str(HEALTHY), "--faults", FAULT, "--cases", CASE]


def _args(store: Path, results: Path) -> list[str]:
    return [*BOARD, "--store", str(store), "--results", str(results)]


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


@pytest.fixture(scope="module")
def board(
    digits_grid: dict[tuple[str, int], RunRecord],
    shared_store_root: Path,
    pool: LocalEngine,
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[Path, Path]:
    """The shipped diagnosers' result files and the leaderboard made of them."""
    results = tmp_path_factory.mktemp("results")
    # The board's runs trained on the session's warm pool (the command would start its own).
    the_board = Board(("digits",), ("digits",), classic_seeds=1, fault_seeds=1,
                      healthy_seeds=HEALTHY, cases=(CASE,), faults=(FAULT,))  # fmt: skip
    score("always-healthy", the_board, store=Store(shared_store_root), engine=pool, timeout=60)
    for name in SHIPPED:
        assert main(["score", "--diagnoser", name, *_args(shared_store_root, results)]) == 0
    assert main(["leaderboard", *_args(shared_store_root, results)]) == 0
    return shared_store_root, results


def test_a_result_file_holds_every_answer_with_its_run_key(board: tuple[Path, Path]) -> None:
    store, results = board
    found = resultfile.read(results / "diagnosers" / "rules-v1.json")
    assert found.source == "rules-v1" and found.contract["tuned_on"] == ["digits"]
    assert set(found.software) >= {"python", "torch", "platform"} and found.seconds >= 0
    grid = found.answers[(found.answers["suite"] == "grid") & (found.answers["grid"] == "classic")]
    planned = plan(get_task("digits"), "classic", seeds=1, faults=[FAULT], store=Store(store))
    assert sorted(grid["key"]) == sorted(spec.key() for spec in planned.specs)
    suite = found.answers[found.answers["suite"] == "realbugs"]
    assert sorted(suite["level"]) == ["faulty", "fixed"] and set(suite["prefix"]) == {1.0}


def test_the_headline_holds_what_the_answers_say(board: tuple[Path, Path]) -> None:
    _, results = board
    answers = pd.read_csv(results / "diagnosers" / "rules-v1.csv", keep_default_na=False)
    full = answers[(answers["grid"] == "full") & (answers["every"] == 20)]
    full = full[full["prefix"] == 1.0]  # the whole runs (the cut ones are the prefix table's)
    known = full[full["truth"] == FAULT]
    healthy = full[full["truth"] == "healthy"]
    assert len(known) == 3 and len(healthy) == HEALTHY
    identification = (known["predicted"] == FAULT).mean()
    alarms = (healthy["predicted"] != "healthy").mean()
    table = pd.read_csv(results / "leaderboard.csv", dtype=str).set_index("diagnoser")
    assert table.loc["rules-v1", "score"].startswith(f"{(identification + 1 - alarms) / 2:.3f}")
    assert table.loc["always-healthy", "score"].startswith("0.500")
    text = (results / "leaderboard.md").read_text()
    assert "![identification against false alarms](leaderboard.png)" in text
    kinds = pd.read_csv(results / "leaderboard_kinds.csv", dtype=str).set_index("diagnoser")
    cell = " / ".join(
        kinds.loc["rules-v1", c].split(" ")[0] for c in ("identification", "false alarms")
    )
    per_kind = text.split("## Per kind of task")[1]  # after the headline: the kinds at a glance
    assert f"| rules-v1       | {cell} " in per_kind or f"| rules-v1 | {cell} " in per_kind
    assert (results / "leaderboard_full.md").exists() and (results / "site" / "index.html").exists()


def test_a_new_diagnoser_joins_and_only_its_file_and_the_board_change(
    board: tuple[Path, Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    store, shared = board
    results = tmp_path / "results"
    shutil.copytree(shared, results)
    before = _files(results)
    assert main(["new-diagnoser", NEW, "--dir", str(tmp_path)]) == 0
    monkeypatch.chdir(tmp_path / NEW)  # installed nothing: it is imported from here
    spawned = _count_spawns(monkeypatch)
    assert main(["score", "--diagnoser", NEW_CLASS, *_args(store, results)]) == 0
    answers = resultfile.read(results / "diagnosers" / f"{NEW}.json").answers
    evaluations = answers.groupby(["suite", "grid", "every"]).ngroups
    assert evaluations == 4 and spawned == [1]  # classic, full at 20 and 1, real bugs
    assert set(answers["status"]) == {"ok"}  # each suite's runs built as that suite builds them

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("the leaderboard diagnosed a run")

    with monkeypatch.context() as patched:
        patched.setattr(evaluate_module, "diagnose_safely", refuse)
        assert main(["leaderboard", *_args(store, results)]) == 0
    after = _files(results)
    changed = {n for n in after if before.get(n) != after[n]}
    board_files = ("leaderboard", "false_alarms_by_axis.csv", "site/")
    assert {f"diagnosers/{NEW}.json", f"diagnosers/{NEW}.csv"} <= changed
    assert all(n.startswith(board_files) or n.startswith(f"diagnosers/{NEW}.") for n in changed)
    assert f"| {NEW} " in (results / "leaderboard.md").read_text()
    capsys.readouterr()
    assert main(["leaderboard", *_args(store, results), "--verify", "20"]) == 0
    said = capsys.readouterr().out
    assert all(f"verified {name}: 20 answers" in said for name in (*SHIPPED, NEW))
    assert spawned == [2]  # and one for the answers drawn from each of its suites


def test_a_new_diagnoser_scores_from_the_lite_runs_dataset_with_nothing_trained(
    board: tuple[Path, Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    store, shared = board
    results = tmp_path / "results"
    shutil.copytree(shared, results)
    lite = tmp_path / "runs"
    assert (
        main(["runs", "export", "--store", str(store), "--runs", "none", "--out", str(lite)]) == 0
    )
    assert main(["new-diagnoser", NEW, "--dir", str(tmp_path)]) == 0
    monkeypatch.chdir(tmp_path / NEW)
    empty = tmp_path / "empty"  # a fresh clone's: nothing trained, nothing stored
    argv = [*BOARD, "--store", str(empty), "--runs", str(lite), "--results", str(results)]
    assert main(["score", "--diagnoser", NEW_CLASS, *argv]) == 0
    assert list(empty.glob("*/*/seed-*/*/*.json")) == []  # no run trained
    answers = resultfile.read(results / "diagnosers" / f"{NEW}.json").answers
    assert set(answers["status"]) == {"ok"} and set(answers["every"]) == {20}  # lite: no every=1
    capsys.readouterr()
    assert main(["leaderboard", *argv]) == 0
    text = (results / "leaderboard.md").read_text()
    assert f"| {NEW} " in text and f"`{NEW}` has no every-step columns" in text


def _count_spawns(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """A one-item list counting the worker processes started from now on."""
    count, spawn = [0], worker_module._spawn

    def counted():  # type: ignore[no-untyped-def]
        count[0] += 1
        return spawn()

    monkeypatch.setattr(worker_module, "_spawn", counted)
    return count


def _edit_one_answer(results: Path, name: str) -> pd.DataFrame:
    found = resultfile.read(results / "diagnosers" / f"{name}.json")
    answers = found.answers.copy()
    ok = answers.index[answers["status"] == "ok"][0]
    answers.loc[ok, "predicted"] = "frozen_layer" if answers.loc[ok, "predicted"] != (
        "frozen_layer") else "healthy"  # fmt: skip
    return answers


def test_an_edited_file_is_refused_before_anything_is_written(
    board: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store, shared = board
    results = tmp_path / "results"
    shutil.copytree(shared, results)
    answers = _edit_one_answer(results, "rules-v1")
    answers.to_csv(results / "diagnosers" / "rules-v1.csv", index=False, lineterminator="\n")
    before = _files(results)
    capsys.readouterr()
    assert main(["leaderboard", *_args(store, results)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "rules-v1.json" in err and "checksum" in err and "faultbench score" in err
    assert _files(results) == before


def _forge(results: Path, name: str, answers: pd.DataFrame) -> None:
    """Rewrite a file with changed answers and a checksum that fits them."""
    found = resultfile.read(results / "diagnosers" / f"{name}.json")
    forged = resultfile.ResultFile(
        **{**{k: getattr(found, k) for k in found.__dataclass_fields__}, "answers": answers}
    )
    resultfile.write(forged, results / "diagnosers")


def test_verify_refuses_a_file_whose_answers_the_diagnoser_does_not_give(
    board: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store, shared = board
    results = tmp_path / "results"
    shutil.copytree(shared, results)
    edited = _edit_one_answer(results, "rules-v1")
    _forge(results, "rules-v1", edited)
    assert main(["leaderboard", *_args(store, results)]) == 0  # it passes the checksum
    capsys.readouterr()
    every = str(len(edited))  # the draw is random: ask every answer, the edited one included
    assert main(["leaderboard", *_args(store, results), "--verify", every]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "rules-v1.json" in err and f"1 of {every}" in err


def test_a_file_of_other_runs_or_another_board_is_refused_with_the_fix(
    board: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store, shared = board
    results = tmp_path / "results"
    shutil.copytree(shared, results)
    capsys.readouterr()
    assert main(["leaderboard", *_args(store, results), "--seeds", "2"]) == 2
    err = capsys.readouterr().err
    assert "another board" in err and "classic_seeds" in err
    assert "faultbench score --diagnoser" in err
    found = resultfile.read(results / "diagnosers" / "always-healthy.json")
    answers = found.answers.copy()
    answers.loc[0, "key"] = "0" * 20  # a run of other code
    _forge(results, "always-healthy", answers)
    assert main(["leaderboard", *_args(store, results)]) == 2
    err = capsys.readouterr().err
    assert "made on other runs: 1 of its" in err
    assert "faultbench score --diagnoser always-healthy" in err


def test_the_full_grid_gives_the_headline_and_the_design_axes(board: tuple[Path, Path]) -> None:
    _, results = board
    answers = resultfile.read(results / "diagnosers" / "rules-v1.json").answers
    full = answers[answers["grid"] == "full"]
    assert sorted(set(full["every"])) == [1, 20] and (full["base"] >= 0).all()
    axes = pd.read_csv(results / "false_alarms_by_axis.csv")
    assert {"optimizer", "depth", "norm"} <= set(axes["axis"])
    mine = axes[axes["diagnoser"] == "rules-v1"]
    assert (mine.groupby("axis")["runs"].sum() == HEALTHY).all()  # each healthy run, once
    kinds = pd.read_csv(results / "leaderboard_kinds.csv")
    assert set(kinds["kind"]) == {"multiclass"} and len(kinds) == len(SHIPPED)
    assert (results / "leaderboard_levels.png").read_bytes()[:4] == b"\x89PNG"
    # how early it knows: the default sampling's runs cut at each share, and the whole
    cut = full[full["every"] == 20]
    assert sorted(set(cut["prefix"])) == [0.1, 0.25, 0.5, 1.0]
    assert (cut.groupby("prefix")["key"].apply(sorted).map(tuple).nunique()) == 1  # same runs
    early = pd.read_csv(results / "leaderboard_prefixes.csv")
    early = early[early["diagnoser"] == "rules-v1"]
    assert sorted(early["prefix"]) == [0.1, 0.25, 0.5, 1.0]
    assert set(early["runs"]) == {len(cut) // 4}
    assert "## How early it knows" in (results / "leaderboard_full.md").read_text()


def test_the_leaderboard_writes_the_pages_generated_blocks(
    board: tuple[Path, Path], tmp_path: Path
) -> None:
    store, shared = board
    results = tmp_path / "results"
    shutil.copytree(shared, results)
    (tmp_path / pages.TEMPLATES).mkdir(parents=True)
    template = '`rules-v1` identifies {{ leaderboard("rules-v1", "identification") }}.\n'
    (tmp_path / pages.TEMPLATES / f"board{pages.SUFFIX}").write_text(template)
    page = tmp_path / "docs" / "page.md"
    page.write_text(f"By hand.\n\n{pages.start_marker('board')}\n<!-- results:board:end -->\n")
    assert main(["leaderboard", *_args(store, results)]) == 0
    table = pd.read_csv(results / "leaderboard.csv", dtype=str).set_index("diagnoser")
    cell = table.loc["rules-v1", "identification"]
    assert f"`rules-v1` identifies {cell}.\n" in page.read_text()


def test_verify_asks_an_instrument_diagnoser_as_it_was_scored_on_cut_runs(
    board: tuple[Path, Path], tmp_path: Path
) -> None:
    # cockpit-live reads its instrument's record, which holds the whole run: scored
    # `undecided` on every cut run; --verify must ask it the same way, not on the whole record.
    store, shared = board
    results = tmp_path / "results"
    shutil.copytree(shared, results)
    assert main(["score", "--diagnoser", "cockpit-live", *_args(store, results)]) == 0
    answers = resultfile.read(results / "diagnosers" / "cockpit-live.json").answers
    cut = answers[answers["prefix"] < 1.0]
    assert len(cut) and set(cut["predicted"]) == {"undecided"}
    assert main(["leaderboard", *_args(store, results), "--verify", str(len(answers))]) == 0
