"""The leaderboard's tables: one row per diagnoser, the scores of ``scoring.scores`` side by
side, per task, per variant, per design axis, and recall by severity level.

Each reads one table of scored runs (``scoring.scores.COLUMNS``); the files are
assembled from the result files by :mod:`faultbench.reporting.assemble`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from faultbench.scoring import scores
from faultbench.scoring.scores import Share
from faultbench.training.monitor import DEFAULT_EVERY

LEVELS = ("mild", "moderate", "severe")  # severity levels, mildest first
SCORE = (
    "*Score* is the mean of identification and the share of healthy drawn runs called "
    "healthy (1 - false alarms), since a practitioner pays for a false alarm as for a miss."
)


def whole(frame: pd.DataFrame) -> pd.DataFrame:
    """The answers on whole runs (prefix 1): what every table but a prefix one reads."""
    return frame[frame["prefix"] == 1.0]


def headline_part(mine: pd.DataFrame) -> pd.DataFrame:
    """The answers a headline cell reads: the full grid at the default sampling, or the
    classic grid on a board without a full grid."""
    full = mine[(mine["grid"] == "full") & (mine["every"] == DEFAULT_EVERY)]
    return full if len(full) else mine[mine["grid"] == "classic"]


def cell(share: Share) -> str:
    """A share as the tables write it: value [low, high], or n/a."""
    return "n/a" if not share.n else f"{share.value:.3f} [{share.low:.2f}, {share.high:.2f}]"


def rows(
    frame: pd.DataFrame,
    tuned_on: dict[str, Sequence[str]],
    subsets: Mapping[str, str] | None = None,
    instruments: Mapping[str, Sequence[str]] | None = None,
) -> list[dict[str, Any]]:
    """One leaderboard row per diagnoser in ``frame``, in order of appearance.

    The headline is the full grid (drawn bases) read at the Monitor's default
    sampling; beside it the reference recipe (the classic grid) and every step
    (the full grid read at ``every=1``). ``subsets`` says, per diagnoser, on
    what part of the grid it was scored when not on all of it; ``instruments``,
    which instruments rode in the loop of the runs it read (its ``instrument``).
    """
    out = []
    for name in dict.fromkeys(frame["diagnoser"]):
        part = frame[frame["diagnoser"] == name]
        full = part[(part["grid"] == "full") & (part["every"] == DEFAULT_EVERY)]
        every_step = part[(part["grid"] == "full") & (part["every"] == 1)]
        classic = part[part["grid"] == "classic"]
        s = scores.summary(full if len(full) else part)  # the headline: the full grid
        # A diagnoser scored on a subset has the full grid's healthy drawn runs alone: its
        # identification is the classic grid's (its row's "scored on" says so).
        s_id = scores.summary(classic) if _healthy_only(full) and len(classic) else s
        ident = s_id["identification"]
        row: dict[str, Any] = {
            "diagnoser": name,
            "tuned on": ", ".join(tuned_on.get(name, ())) or "nothing",
            "runs": s["runs"],
            "scored on": (subsets or {}).get(name, "every run"),
            "instrument": ", ".join((instruments or {}).get(name, ())) or "none",
            "identification": cell(ident["accuracy"]),
            "macro-recall": f"{ident['macro_recall']:.3f}",
        }
        for level in LEVELS:
            row[f"ident. {level}"] = cell(ident["by_level"].get(level, scores.wilson(0, 0)))
        row["ident. reference recipe"] = cell(scores.identification(classic)["accuracy"])
        row["ident. every step"] = cell(scores.identification(every_step)["accuracy"])
        row["ident. tuned-on task"] = cell(s_id["splits"]["tuned_on_task"]["identification"])
        row["ident. held-out tasks"] = cell(s_id["splits"]["held_out_task"]["identification"])
        row["known faults not healthy"] = cell(s_id["known_detection"])
        row["held-out faults not healthy"] = cell(s_id["detection"]["not_healthy"])
        row["held-out faults other_fault"] = cell(s_id["detection"]["other_fault"])
        row["alarm precision"] = cell(s_id["alarm_precision"])
        row["false alarms drawn bases"] = cell(s["false_alarms"])
        row["false alarms reference recipe"] = cell(scores.false_alarms(classic))
        row["false alarms every step"] = cell(scores.false_alarms(every_step))
        row["probe steps/diagnosis"] = f"{s['cost']['probe_steps']:.0f}"
        out.append(row)
    return out


def _healthy_only(frame: pd.DataFrame) -> bool:
    """Whether ``frame`` holds runs and every one of them is healthy."""
    return bool(len(frame)) and bool((frame["truth"] == "healthy").all())


def alarms_by_axis(designs: pd.DataFrame) -> pd.DataFrame:
    """False alarms per value of each design axis, per diagnoser.

    ``designs`` has one row per (diagnoser, healthy drawn run, axis): columns
    diagnoser, task, seed, axis, value, alarm. Which optimizer, normalization
    or schedule draws the alarms.
    """
    out = []
    for (name, axis, value), part in designs.groupby(["diagnoser", "axis", "value"], sort=False):
        share = scores.wilson(int(part["alarm"].sum()), len(part))
        out.append(
            {
                "diagnoser": name,
                "axis": axis,
                "value": value,
                "runs": share.n,
                "false_alarms": share.hits,
                "share": f"{share.value:.3f}",
                "low": f"{share.low:.3f}",
                "high": f"{share.high:.3f}",
            }
        )
    columns = ["diagnoser", "axis", "value", "runs", "false_alarms", "share", "low", "high"]
    return pd.DataFrame(out, columns=columns)


def per_task(frame: pd.DataFrame) -> pd.DataFrame:
    """Identification accuracy of every diagnoser on every task (rows: diagnosers), on the
    full grid at the default sampling (the classic grid where no full grid was scored)."""
    full = frame[(frame["grid"] == "full") & (frame["every"] == DEFAULT_EVERY)]
    frame = full if len(full) else frame
    cells = {
        (d, t): cell(scores.identification(part)["accuracy"])
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
    full = frame[
        (frame["grid"] == "full")
        & (frame["every"] == DEFAULT_EVERY)
        & (frame["kind"] != scores.HEALTHY)
    ]
    # scores.identification and scores.detection on each group, counted at once: a known
    # fault's hit names it, a held-out one's is any answer but healthy (a failed answer: none)
    held_out = full["kind"].to_numpy() == scores.HELDOUT
    answered = full["status"].to_numpy() == "ok"
    predicted = full["predicted"].to_numpy()
    hit = answered & np.where(held_out, predicted != scores.HEALTHY, predicted == full["truth"])
    counted = full.assign(hit=hit, held=held_out).groupby(
        ["diagnoser", "task", "variant"], sort=False
    )
    out = []
    for (name, task, variant), part in counted:
        held = bool(part["held"].iloc[0])
        share = scores.wilson(int(part["hit"].sum()), len(part))
        out.append(
            {
                "diagnoser": name,
                "task": task,
                "variant": variant,
                "kind": "held-out: not called healthy" if held else "known: named",
                "share": cell(share),
            }
        )
    return pd.DataFrame(out, columns=["diagnoser", "task", "variant", "kind", "share"])


def levels_figure(frame: pd.DataFrame, path: Path) -> Path:
    """Identification recall by severity level, one line per diagnoser (``frame``: the full
    grid at the default sampling)."""
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
    return path
