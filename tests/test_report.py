"""`faultbench report`: tables from stored runs, identical twice, with the right numbers."""

from __future__ import annotations

import math
import re
import shutil
import subprocess
from fnmatch import fnmatch
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy.stats import norm

from conftest import DIGITS_CONDITIONS
from faultbench.cli.commands.report import VOLATILE
from faultbench.cli.main import main
from faultbench.faults.fault import HEALTHY, condition_names
from faultbench.reporting.figures import full_confusion
from faultbench.reporting.provenance import WALL_CLOCK, wait_table
from faultbench.reporting.report import (
    FINAL_WINDOW,
    fault_table,
    markdown_table,
    mcnemar_table,
    score_table,
    wilson,
)
from faultbench.scoring.evaluate import Report, RunResult, evaluate
from faultbench.storage.records import RunRecord
from faultbench.storage.store import Store
from faultbench.tasks.task import get_task, task_names

REPO = Path(__file__).resolve().parents[1]
SEEDS = 2  # of the session grid's three: enough for a mean, an sd and a "last seed"
BASELINES = ("always-healthy", "random")


def _report(root: Path, out: Path) -> int:
    argv = [
        "report",
        "--task",
        "digits",
        "--seeds",
        str(SEEDS),
        "--store",
        str(root),
        "--out",
        str(out),
        "--allow-dirty",  # the tree under test may hold uncommitted work
        "--grids",
        "classic",  # the full grid is make report's: too many runs for a test
    ]
    for name in BASELINES:
        argv += ["--diagnoser", name]
    return main(argv)


@pytest.fixture(scope="module")
def results(
    digits_grid: dict[tuple[str, int], RunRecord],
    shared_store_root: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[Path, Path]:
    """Two reports written from the same stored digits runs."""
    first, second = tmp_path_factory.mktemp("first"), tmp_path_factory.mktemp("second")
    assert _report(shared_store_root, first) == 0
    assert _report(shared_store_root, second) == 0
    return first, second


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def test_second_report_is_identical_apart_from_provenance(results: tuple[Path, Path]) -> None:
    first, second = (_files(r) for r in results)
    assert first.keys() == second.keys()
    stable = sorted(n for n in first if not any(fnmatch(n, pattern) for pattern in VOLATILE))
    assert {"faults.csv", "faults.md", "scores.csv", "scores.md", "mcnemar.csv"} <= set(stable)
    assert [name for name in stable if first[name] != second[name]] == []


def test_report_retrains_nothing_stored(results: tuple[Path, Path]) -> None:
    for root in results:
        assert "- runs trained by this report: 0\n" in (root / "README.md").read_text()


def test_report_writes_every_figure(results: tuple[Path, Path]) -> None:
    root = results[0]
    expected = {f"confusion/{d}-digits.png" for d in BASELINES} | {"curves/digits.png"}
    written = {str(p.relative_to(root)) for p in root.glob("*/*.png")}
    assert written == expected
    assert all((root / name).read_bytes()[:4] == b"\x89PNG" for name in expected)


@pytest.mark.parametrize("condition", DIGITS_CONDITIONS)
def test_fault_row_matches_the_records(
    condition: str, digits_grid: dict[tuple[str, int], RunRecord]
) -> None:
    grid = {(c, s): r for (c, s), r in digits_grid.items() if s < SEEDS}
    row = fault_table({"digits": grid}).set_index(["task", "condition"]).loc[("digits", condition)]
    traces = [digits_grid[(condition, s)].trace for s in range(SEEDS)]
    assert all(t is not None for t in traces)
    acc = [t.val_acc[-1] for t in traces if t is not None]
    first = [t.loss[0] for t in traces if t is not None]
    final = [t.loss[-FINAL_WINDOW:].mean() for t in traces if t is not None]
    assert row["val_acc_mean"] == f"{np.mean(acc):.3f}"
    assert row["val_acc_sd"] == f"{np.std(acc, ddof=1):.3f}"
    assert row["val_acc_last"] == f"{acc[-1]:.3f}"
    assert row["first_loss_mean"] == f"{np.mean(first):.3f}"
    assert row["ln_classes"] == f"{math.log(10):.3f}"
    assert row["final_loss_last"] == f"{final[-1]:.3f}"
    assert not [c for c in row.index if "wait" in c]  # wall-clock: kept in waits.csv
    assert row["seeds"] == str(SEEDS) and row["failed_runs"] == "0"


def test_wait_share_is_a_wall_clock_table_of_its_own(
    digits_grid: dict[tuple[str, int], RunRecord],
) -> None:
    grid = {(c, s): r for (c, s), r in digits_grid.items() if s < SEEDS}
    table = wait_table({"digits": grid}).set_index(["task", "condition"])
    for condition in DIGITS_CONDITIONS:
        wait = [digits_grid[(condition, s)].trace.wait_share for s in range(SEEDS)]  # type: ignore[union-attr]
        row = table.loc[("digits", condition)]
        assert row["wait_share_mean"] == f"{np.mean(wait):.3f}"
        assert row["wait_share_sd"] == f"{np.std(wait, ddof=1):.3f}"
        assert row["wait_share_last"] == f"{wait[-1]:.3f}"


def test_the_readme_marks_every_wall_clock_file(results: tuple[Path, Path]) -> None:
    assert set(VOLATILE) == set(WALL_CLOCK)
    readme = (results[0] / "README.md").read_text()
    section = readme.split("## Wall-clock measurements", 1)[1].split("## Files", 1)[0]
    for name in WALL_CLOCK:
        assert f"- `{name}`: " in section
    for name in ("timings.csv", "diagnosers/always-healthy.json"):
        assert f"- `{name}` (wall-clock)" in readme
    assert "generated (wall-clock): " in readme
    scores = pd.read_csv(results[0] / "scores.csv")
    assert not [c for c in scores.columns if "second" in c or "wait" in c]  # kept out of scores


def test_committed_provenance_holds_no_machine_path(
    results: tuple[Path, Path], shared_store_root: Path
) -> None:
    for path in results[0].rglob("*"):
        if path.suffix in (".md", ".csv"):
            text = path.read_text()
            assert str(shared_store_root) not in text, path
            assert str(results[0]) not in text, path
            assert str(Path.home()) + "/" not in text, path
    readme = (results[0] / "README.md").read_text()
    assert "--store" not in readme and "--out results" not in readme
    assert f"--out {results[0].name} --task digits" in readme


def _git(repo: Path, *args: str) -> None:
    ident = ["-c", "user.email=t@example.com", "-c", "user.name=t"]
    subprocess.run(["git", *ident, "-C", str(repo), *args], check=True, capture_output=True)


@pytest.fixture
def dirty_checkout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A git checkout with an uncommitted change, taken for the code's own tree."""
    repo = tmp_path / "checkout"
    (repo / "faultbench").mkdir(parents=True)
    (repo / "results").mkdir()
    (repo / "faultbench" / "loop.py").write_text("steps = 1\n")
    (repo / "results" / "scores.csv").write_text("old\n")
    _git(repo, "init", "-q")
    _git(repo, "add", ".")
    _git(repo, "commit", "-qm", "first")
    monkeypatch.setattr("faultbench.reporting.provenance.source_root", lambda: repo)
    return repo


def test_report_refuses_a_dirty_tree_before_any_work(
    dirty_checkout: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (dirty_checkout / "faultbench" / "loop.py").write_text("steps = 2\n")
    out = dirty_checkout / "results"
    argv = ["report", "--task", "digits", "--diagnoser", "random", "--out", str(out)]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "faultbench: error: the code has uncommitted changes (faultbench/loop.py); expected a "
        "clean git tree, so that the revision in results/README.md is the code that made "
        "them: commit or stash them, or pass --allow-dirty"
    ]
    assert (out / "scores.csv").read_text() == "old\n"  # nothing written


def test_changes_to_the_results_themselves_do_not_count_as_dirty(dirty_checkout: Path) -> None:
    """Nor do the pages the report writes beside them (the README, docs/'s blocks)."""
    (dirty_checkout / "docs").mkdir()
    for page in ("README.md", "docs/method.md"):
        (dirty_checkout / page).write_text("old\n")
    _git(dirty_checkout, "add", ".")
    _git(dirty_checkout, "commit", "-qm", "pages")
    for page in ("results/scores.csv", "README.md", "docs/method.md"):
        (dirty_checkout / page).write_text("regenerated\n")
    from faultbench.reporting.provenance import git_state, require_clean

    require_clean(dirty_checkout, out=dirty_checkout / "results", allow_dirty=False)
    rev, changed = git_state(dirty_checkout)
    assert changed == ["results/scores.csv"] and len(rev) == 40


def test_allow_dirty_writes_and_says_so(
    dirty_checkout: Path, digits_grid: dict, shared_store_root: Path, tmp_path: Path
) -> None:
    (dirty_checkout / "faultbench" / "loop.py").write_text("steps = 2\n")
    out = tmp_path / "out"
    argv = [
        "report",
        "--task",
        "digits",
        "--diagnoser",
        "random",
        "--seeds",
        "1",
        "--grids",
        "classic",
    ]
    assert main([*argv, "--store", str(shared_store_root), "--out", str(out), "--allow-dirty"]) == 0
    readme = (out / "README.md").read_text()
    assert "+dirty" in readme and "--allow-dirty" in readme


def test_fault_table_lists_every_condition_in_order(
    digits_grid: dict[tuple[str, int], RunRecord],
) -> None:
    table = fault_table({"digits": digits_grid})
    assert list(table["condition"]) == condition_names()  # a language model's: not applicable
    moot = table.set_index("condition")["not_applicable"]
    assert all(moot[c] for c in condition_names() if c not in DIGITS_CONDITIONS)
    assert not any(moot[c] for c in DIGITS_CONDITIONS)


def test_wilson_matches_the_closed_form() -> None:
    k, n, z = 7, 40, norm.ppf(0.975)
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    assert wilson(k, n) == pytest.approx((centre - half, centre + half), abs=1e-12)


def test_scores_of_the_baselines(
    digits_grid: dict[tuple[str, int], RunRecord], shared_store_root: Path
) -> None:
    store = Store(shared_store_root)
    reports = [
        evaluate(name, "digits", seeds=SEEDS, grid="classic", store=store) for name in BASELINES
    ]
    table = score_table(reports).set_index("diagnoser")
    assert list(table.index) == sorted(BASELINES)
    healthy = table.loc["always-healthy"]
    assert healthy["correct"] == str(SEEDS) and healthy["total"] == str(10 * SEEDS)
    assert healthy["false_alarms"] == "0" and healthy["false_alarm_rate"] == "0.000"
    assert healthy[f"recall_{HEALTHY}"] == "1.000"
    assert all(healthy[f"recall_{c}"] == "0.000" for c in DIGITS_CONDITIONS[1:])
    low, high = wilson(SEEDS, 10 * SEEDS)
    assert (healthy["wilson_low"], healthy["wilson_high"]) == (f"{low:.3f}", f"{high:.3f}")
    rand, report = table.loc["random"], reports[1]
    alarms = sum(r.predicted != HEALTHY for r in report.results if r.condition == HEALTHY)
    assert rand["false_alarms"] == str(alarms) and rand["correct"] == str(report.correct)
    assert healthy["split"] == rand["split"] == "held-out"


def _fake(name: str, right: list[bool]) -> Report:
    results = tuple(
        RunResult(
            seed=i, condition=HEALTHY, predicted=HEALTHY if ok else "huge_inputs", status="ok"
        )
        for i, ok in enumerate(right)
    )
    return Report(diagnoser=name, task="digits", tuned=False, tuned_on=(), results=results)


def test_mcnemar_counts_discordant_pairs_and_uses_the_exact_test() -> None:
    a = _fake("a", [True] * 6 + [False] * 2 + [True] * 3)
    b = _fake("b", [False] * 6 + [False] * 2 + [True] * 3)
    row = mcnemar_table([b, a]).iloc[0]
    assert (row["diagnoser_a"], row["diagnoser_b"]) == ("a", "b")
    assert (row["a_only"], row["b_only"], row["both"], row["neither"]) == ("6", "0", "3", "2")
    assert row["p_value"] == f"{2 * 0.5**6:.4g}"  # exact two-sided: 2 × P(6 of 6)


def test_a_figure_is_drawn_again_only_when_what_it_shows_changed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from faultbench.reporting import figures

    healthy, mixed = _fake("a", [True, True]), _fake("a", [True, False])
    path = tmp_path / "confusion.png"
    figures.confusion_figure(healthy, path)
    drawn = path.read_bytes()
    copy = tmp_path / "copy.png"
    copy.write_bytes(drawn)

    def no_drawing(*args: object, **kwargs: object) -> None:
        raise AssertionError("drew a figure whose file already shows these numbers")

    with monkeypatch.context() as patched:
        patched.setattr(figures.plt, "subplots", no_drawing)
        assert figures.confusion_figure(healthy, copy) == copy  # any file with that digest
    assert copy.read_bytes() == drawn
    figures.confusion_figure(mixed, path)  # other numbers: drawn again
    assert path.read_bytes() != drawn
    figures.confusion_figure(healthy, path)  # and back: the same bytes as the first time
    assert path.read_bytes() == drawn
    path.write_bytes(drawn[: len(drawn) // 2])  # a half-written file is drawn again
    figures.confusion_figure(healthy, path)
    assert path.read_bytes() == drawn


def test_confusion_has_every_label_even_without_examples() -> None:
    matrix = full_confusion(_fake("a", [True, False]))
    assert list(matrix.index) == condition_names()
    assert list(matrix.columns) == [*condition_names(), "unknown"]
    assert matrix.loc[HEALTHY, HEALTHY] == 1 and matrix.loc[HEALTHY, "huge_inputs"] == 1
    assert int(matrix.to_numpy().sum()) == 2


def test_markdown_table_escapes_pipes() -> None:
    text = markdown_table(pd.DataFrame({"a|b": ["x|y"], "c": ["1"]}))
    assert text.splitlines() == ["| a\\|b | c |", "|---|---|", "| x\\|y | 1 |"]


@pytest.mark.parametrize(
    ("flag", "value", "message"),
    [
        ("--task", "digitz", "Unknown task 'digitz'. Did you mean 'digits'?"),
        ("--diagnoser", "randm", "Unknown diagnoser 'randm'. Did you mean 'random'?"),
    ],
)
def test_unknown_names_exit_2_with_one_line(
    flag: str, value: str, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["report", flag, value, "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert re.search(re.escape(message), err) and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("task", task_names())
def test_fault_table_gives_ln_c_for_classifiers_only(task: str) -> None:
    n_classes = get_task(task).n_classes
    rows = fault_table({task: {}})  # no runs: the rows still say what ln C is there
    expected = f"{math.log(n_classes):.3f}" if n_classes >= 2 else "nan"
    assert set(rows["ln_classes"]) == {expected}


def test_a_slice_writes_its_own_files_and_leaves_the_projects_pages_alone(
    digits_grid: dict[tuple[str, int], RunRecord], shared_store_root: Path, tmp_path: Path
) -> None:
    # The documented way to regenerate one slice, into a folder of a checkout whose README
    # and docs/ name rows of the whole board (cockpit-live's, ...): they stay as they were.
    project = tmp_path / "project"
    shutil.copytree(REPO / "docs", project / "docs")
    shutil.copy(REPO / "README.md", project / "README.md")
    before = _files(project)
    outs = [project / "slice-a", project / "slice-b"]
    for out in outs:
        argv = ["report", "--grids", "classic", "--diagnoser", "rules", "--task", "digits"]
        argv += ["--seeds", "1", "--allow-dirty", "--store", str(shared_store_root)]
        assert main([*argv, "--out", str(out)]) == 0
    after = _files(project)
    assert {n: b for n, b in after.items() if not n.startswith("slice-")} == before
    first, second = (_files(out) for out in outs)
    assert first.keys() == second.keys() and "leaderboard.md" in first
    stable = [n for n in first if not any(fnmatch(n, pattern) for pattern in VOLATILE)]
    assert [n for n in stable if first[n] != second[n]] == []
