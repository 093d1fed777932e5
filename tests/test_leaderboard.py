"""The leaderboard's rows and files from a hand-made table of scored runs."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from faultbench.reporting.leaderboard import per_task, rows, write


def _frame() -> pd.DataFrame:
    base = {
        "seed": 0,
        "grid": "full",
        "status": "ok",
        "probe_steps": 0,
        "diagnose_seconds": 0.01,
        "variant": "v",
    }
    runs = []
    for diagnoser, right in (("good", True), ("bad", False)):
        for task, tuned in (("digits", True), ("synthetic", False)):
            for level in ("mild", "moderate", "severe"):
                runs.append(
                    {
                        **base,
                        "diagnoser": diagnoser,
                        "task": task,
                        "tuned": tuned,
                        "truth": "lr_too_high",
                        "kind": "known",
                        "level": level,
                        "predicted": "lr_too_high" if right or level == "severe" else "healthy",
                    }
                )
            runs.append(
                {
                    **base,
                    "diagnoser": diagnoser,
                    "task": task,
                    "tuned": tuned,
                    "truth": "healthy",
                    "kind": "healthy",
                    "level": "",
                    "variant": "",
                    "predicted": "healthy",
                }
            )
    return pd.DataFrame(runs)


def test_rows_hold_each_diagnosers_scores() -> None:
    table = {r["diagnoser"]: r for r in rows(_frame(), {"good": ["digits"]})}
    assert table["good"]["identification"].startswith("1.000")
    assert table["good"]["tuned on"] == "digits"
    assert table["bad"]["tuned on"] == "nothing"
    # bad names only the severe runs: 2 of 6
    assert table["bad"]["identification"].startswith("0.333")
    assert table["bad"]["ident. mild"].startswith("0.000")
    assert table["bad"]["ident. severe"].startswith("1.000")
    assert table["good"]["false alarms"].startswith("0.000")
    assert table["good"]["held-out faults not healthy"] == "n/a"  # none in this grid


def test_per_task_has_every_diagnoser_on_every_task() -> None:
    grid = per_task(_frame())
    assert list(grid.index) == ["good", "bad"]
    assert list(grid.columns) == ["digits", "synthetic"]
    assert grid.loc["bad", "synthetic"].startswith("0.333")


def test_write_makes_the_three_files(tmp_path: Path) -> None:
    paths = write(_frame(), {"good": ["digits"]}, tmp_path)
    assert [p.name for p in paths] == [
        "leaderboard.md", "leaderboard.csv", "leaderboard_tasks.csv", "leaderboard_variants.csv",
        "leaderboard.png",
    ]  # fmt: skip
    text = (tmp_path / "leaderboard.md").read_text()
    assert "| good |" in text and "| bad |" in text
    header = text.splitlines()[
        next(i for i, line in enumerate(text.splitlines()) if line.startswith("| diagnoser"))
    ]
    assert "seconds" not in header  # a measurement: it lives in timings.md
    csv = pd.read_csv(tmp_path / "leaderboard.csv")
    assert list(csv["diagnoser"]) == ["good", "bad"]
    assert (tmp_path / "leaderboard.png").read_bytes()[:4] == b"\x89PNG"
    again = tmp_path / "again"
    write(_frame(), {"good": ["digits"]}, again)
    for name in [p.name for p in paths]:
        assert (again / name).read_bytes() == (tmp_path / name).read_bytes()


def test_per_variant_gives_recall_of_each_variant_counted_by_hand() -> None:
    from faultbench.reporting.leaderboard import per_variant

    table = per_variant(_frame()).set_index(["diagnoser", "task", "variant"])["share"]
    # "bad" names lr_too_high only at the severe level: 1 of its 3 runs per task.
    assert table[("bad", "digits", "v")].startswith("0.333")
    assert table[("good", "synthetic", "v")].startswith("1.000")
