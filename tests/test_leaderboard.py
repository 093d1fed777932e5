"""The leaderboard's rows and files from a hand-made table of scored runs."""

from __future__ import annotations

import pandas as pd

from faultbench.reporting.leaderboard import alarms_by_axis, per_task, rows


def _frame(*, grid: str = "full", every: int = 20) -> pd.DataFrame:
    base = {
        "seed": 0,
        "grid": grid,
        "status": "ok",
        "probe_steps": 0,
        "diagnose_seconds": 0.01,
        "variant": "v",
        "drawn": grid == "full",
        "every": every,
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
                    # bad cries wolf on the reference recipe and when it reads every step
                    "predicted": "healthy"
                    if right or (grid, every) == ("full", 20)
                    else "dead_units",
                }
            )
    return pd.DataFrame(runs)


def _board() -> pd.DataFrame:
    """The full grid at the default sampling, the same read at every step, the classic grid."""
    return pd.concat([_frame(), _frame(every=1), _frame(grid="classic")], ignore_index=True)


def test_rows_hold_each_diagnosers_scores() -> None:
    table = {r["diagnoser"]: r for r in rows(_board(), {"good": ["digits"]})}
    assert table["good"]["identification"].startswith("1.000")
    assert table["good"]["tuned on"] == "digits"
    assert table["bad"]["tuned on"] == "nothing"
    # bad names only the severe runs: 2 of 6
    assert table["bad"]["identification"].startswith("0.333")
    assert table["bad"]["ident. mild"].startswith("0.000")
    assert table["bad"]["ident. severe"].startswith("1.000")
    assert table["good"]["false alarms drawn bases"].startswith("0.000")
    assert table["good"]["held-out faults not healthy"] == "n/a"  # none in this grid
    assert table["bad"]["runs"] == 8  # the headline counts the full grid at the default only
    # bad's two healthy runs are alarms on the reference recipe and at every step only
    assert table["bad"]["false alarms drawn bases"].startswith("0.000 [0.00, 0.66]")
    assert table["bad"]["false alarms reference recipe"].startswith("1.000")
    assert table["bad"]["false alarms every step"].startswith("1.000")
    assert table["bad"]["ident. every step"].startswith("0.333")
    assert table["bad"]["ident. reference recipe"].startswith("0.333")
    # an alarm is any answer but healthy: bad raises 2 (both right) of its 8 runs' answers
    assert table["bad"]["known faults not healthy"].startswith("0.333")
    assert table["bad"]["alarm precision"].startswith("1.000")


def test_false_alarms_per_design_axis_are_counted_by_hand() -> None:
    designs = pd.DataFrame(
        [
            ("a", "digits", seed, axis, value, alarm)
            for seed, (norm, opt, alarm) in enumerate(
                [("batch", "sgd", True), ("batch", "adam", False), ("none", "sgd", True)]
            )
            for axis, value in (("norm", norm), ("optimizer", opt))
        ],
        columns=["diagnoser", "task", "seed", "axis", "value", "alarm"],
    )
    table = alarms_by_axis(designs).set_index(["axis", "value"])
    assert (table.loc[("norm", "batch"), "runs"], table.loc[("norm", "batch"), "false_alarms"]) == (
        2,
        1,
    )
    assert table.loc[("optimizer", "sgd"), "share"] == "1.000"
    assert table.loc[("optimizer", "adam"), "share"] == "0.000"


def test_per_task_has_every_diagnoser_on_every_task() -> None:
    grid = per_task(_frame())
    assert list(grid.index) == ["good", "bad"]
    assert list(grid.columns) == ["digits", "synthetic"]
    assert grid.loc["bad", "synthetic"].startswith("0.333")


def test_the_best_trade_offs_are_the_points_no_other_beats() -> None:
    from faultbench.reporting.assemble import pareto

    # (false alarms, identification): c is beaten by a (fewer alarms, more named)
    points = [(0.1, 0.6), (0.4, 0.9), (0.3, 0.5), (0.0, 0.2), (0.4, 0.7)]
    assert pareto(points) == [3, 0, 1]


def test_per_variant_gives_recall_of_each_variant_counted_by_hand() -> None:
    from faultbench.reporting.leaderboard import per_variant

    table = per_variant(_frame()).set_index(["diagnoser", "task", "variant"])["share"]
    # "bad" names lr_too_high only at the severe level: 1 of its 3 runs per task.
    assert table[("bad", "digits", "v")].startswith("0.333")
    assert table[("good", "synthetic", "v")].startswith("1.000")


def test_a_diagnoser_with_healthy_drawn_runs_alone_is_identified_on_the_classic_grid() -> None:
    # TrainCheck's subset: the full grid's healthy drawn runs (false alarms) and the classic
    # grid (identification); bad names only the severe runs there: 2 of 6.
    full = _frame()
    board = pd.concat([full[full["truth"] == "healthy"], _frame(grid="classic")])
    table = {r["diagnoser"]: r for r in rows(board, {})}
    assert table["bad"]["identification"].startswith("0.333")
    assert table["bad"]["ident. held-out tasks"].startswith("0.333")
    assert table["bad"]["false alarms drawn bases"].startswith("0.000 [0.00, 0.66]")
    assert table["bad"]["runs"] == 2  # the full grid's: its healthy drawn runs
