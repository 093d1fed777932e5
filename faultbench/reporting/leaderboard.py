"""The leaderboard: one row per diagnoser, the scores of ``scoring.scores`` side by side.

``results/leaderboard.md`` and ``.csv`` are written from one table of scored
runs (``scoring.scores.COLUMNS``), and the figure plots identification recall
against severity level, one line per diagnoser. Seconds per diagnosis are a
wall-clock measurement: they live in ``timings.md``, so this file's bytes are the
same on every machine.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from faultbench.scoring import scores
from faultbench.scoring.scores import Share

LEVELS = ("mild", "moderate", "severe")  # severity levels, mildest first


def _cell(share: Share) -> str:
    return "n/a" if not share.n else f"{share.value:.3f} [{share.low:.2f}, {share.high:.2f}]"


def rows(
    frame: pd.DataFrame,
    tuned_on: dict[str, Sequence[str]],
    subsets: Mapping[str, str] | None = None,
) -> list[dict[str, Any]]:
    """One leaderboard row per diagnoser in ``frame``, in order of appearance.

    ``subsets`` says, per diagnoser, on what part of the grid it was scored
    when not on all of it.
    """
    out = []
    for name in dict.fromkeys(frame["diagnoser"]):
        part = frame[frame["diagnoser"] == name]
        full = part[part["grid"] == "full"]
        s = scores.summary(full if len(full) else part)  # the headline: the full grid
        classic = scores.summary(part)["splits"]["classic_grid"]["identification"]
        ident = s["identification"]
        row: dict[str, Any] = {
            "diagnoser": name,
            "tuned on": ", ".join(tuned_on.get(name, ())) or "nothing",
            "runs": s["runs"],
            "scored on": (subsets or {}).get(name, "every run"),
            "identification": _cell(ident["accuracy"]),
            "macro-recall": f"{ident['macro_recall']:.3f}",
        }
        for level in LEVELS:
            row[f"ident. {level}"] = _cell(ident["by_level"].get(level, scores.wilson(0, 0)))
        row["ident. classic"] = _cell(classic)
        row["ident. tuned-on task"] = _cell(s["splits"]["tuned_on_task"]["identification"])
        row["ident. held-out tasks"] = _cell(s["splits"]["held_out_task"]["identification"])
        row["held-out faults not healthy"] = _cell(s["detection"]["not_healthy"])
        row["held-out faults other_fault"] = _cell(s["detection"]["other_fault"])
        row["false alarms"] = _cell(s["false_alarms"])
        row["probe steps/diagnosis"] = f"{s['cost']['probe_steps']:.0f}"
        out.append(row)
    return out


def per_task(frame: pd.DataFrame) -> pd.DataFrame:
    """Identification accuracy of every diagnoser on every task (rows: diagnosers)."""
    cells = {
        (d, t): _cell(scores.identification(part)["accuracy"])
        for (d, t), part in frame.groupby(["diagnoser", "task"], sort=False)
    }
    diagnosers = list(dict.fromkeys(frame["diagnoser"]))
    tasks = list(dict.fromkeys(frame["task"]))
    return pd.DataFrame(
        [[cells.get((d, t), "n/a") for t in tasks] for d in diagnosers],
        index=pd.Index(diagnosers, name="diagnoser"),
        columns=tasks,
    )


def per_variant(frame: pd.DataFrame) -> pd.DataFrame:
    """Per diagnoser, task and variant of the full grid: recall of the known faults, and the
    share of held-out-fault runs not called healthy (a held-out fault's variant)."""
    full = frame[(frame["grid"] == "full") & (frame["kind"] != scores.HEALTHY)]
    out = []
    for (name, task, variant), part in full.groupby(["diagnoser", "task", "variant"], sort=False):
        held = part["kind"].iloc[0] == scores.HELDOUT
        share = (
            scores.detection(part)["not_healthy"]
            if held
            else scores.identification(part)["accuracy"]
        )
        out.append(
            {
                "diagnoser": name,
                "task": task,
                "variant": variant,
                "kind": "held-out: not called healthy" if held else "known: named",
                "share": _cell(share),
            }
        )
    return pd.DataFrame(out, columns=["diagnoser", "task", "variant", "kind", "share"])


def write(
    frame: pd.DataFrame,
    tuned_on: dict[str, Sequence[str]],
    out: Path,
    subsets: Mapping[str, str] | None = None,
    extra: pd.DataFrame | None = None,
) -> list[Path]:
    """Write ``leaderboard.md``, ``leaderboard.csv`` and the recall-by-level figure to ``out``.

    ``extra``: more columns, one row per diagnoser (the real-bug suite's, see realbugs.md).
    """
    from faultbench.reporting.report import markdown_table

    table = pd.DataFrame(rows(frame, tuned_on, subsets))
    if extra is not None:
        table = table.merge(extra, on="diagnoser", how="left").fillna("n/a")
    tasks = per_task(frame)
    out.mkdir(parents=True, exist_ok=True)
    table.to_csv(out / "leaderboard.csv", index=False, lineterminator="\n")
    tasks.reset_index().to_csv(out / "leaderboard_tasks.csv", index=False, lineterminator="\n")
    per_variant(frame).to_csv(out / "leaderboard_variants.csv", index=False, lineterminator="\n")
    tested = ", ".join(dict.fromkeys(frame["task"]))
    on_full = ", ".join(dict.fromkeys(frame[frame["grid"] == "full"]["task"])) or "none"
    text = "\n".join(
        [
            "# Leaderboard",
            "",
            f"Every diagnoser on the same runs ({len(frame)} diagnoses; tasks: {tested}; "
            f"the full grid on: {on_full}). "
            "Cells are shares with their 95% Wilson interval. *Identification*: runs with one "
            "of the nine known faults, named correctly. *Held-out faults*: runs with a bug "
            "outside the nine; *not healthy* is detection, *other_fault* is detection that "
            "also says it is none of the nine. *False alarms*: healthy runs called anything "
            "else. All columns but *ident. classic* are on the full grid (every variant at "
            "its calibrated mild, moderate and severe levels, and the held-out faults). "
            "Seconds per diagnosis are a wall-clock measurement of the machine that ran the "
            "report: they are in timings.md, beside the other measurements, not here, so "
            "this file is the same on every machine.",
            "",
            markdown_table(table),
            "",
            "## Identification accuracy per task",
            "",
            markdown_table(tasks.reset_index()),
            "",
            "Per variant (every level and seed of it): `leaderboard_variants.csv`.",
            "",
            "![identification recall by severity level](leaderboard.png)",
            "",
        ]
    )
    (out / "leaderboard.md").write_text(text)
    _figure(frame, out / "leaderboard.png")
    return [
        out / "leaderboard.md",
        out / "leaderboard.csv",
        out / "leaderboard_tasks.csv",
        out / "leaderboard_variants.csv",
        out / "leaderboard.png",
    ]


def _figure(frame: pd.DataFrame, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    plotted = False
    for name in dict.fromkeys(frame["diagnoser"]):
        by_level = scores.identification(frame[frame["diagnoser"] == name])["by_level"]
        present = [lv for lv in LEVELS if lv in by_level and by_level[lv].n]
        if not present:
            continue
        values = [by_level[lv].value for lv in present]
        low = [by_level[lv].value - by_level[lv].low for lv in present]
        high = [by_level[lv].high - by_level[lv].value for lv in present]
        ax.errorbar(present, values, yerr=[low, high], marker="o", capsize=3, label=name)
        plotted = True
    ax.set_xlabel("severity level")
    ax.set_ylabel("identification recall (95% Wilson)")
    ax.set_ylim(-0.02, 1.02)
    if plotted:
        ax.legend(fontsize="small", ncol=2)
    else:  # e.g. a report of the classic grid only: no run has a severity level
        ax.text(
            0.5, 0.5, "no run at a calibrated level was scored", ha="center", transform=ax.transAxes
        )
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120, metadata={"Software": None})  # no version stamp: stable bytes
    plt.close(fig)
