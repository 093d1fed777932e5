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
from faultbench.training.monitor import DEFAULT_EVERY

LEVELS = ("mild", "moderate", "severe")  # severity levels, mildest first


def _cell(share: Share) -> str:
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
        ident = s["identification"]
        row: dict[str, Any] = {
            "diagnoser": name,
            "tuned on": ", ".join(tuned_on.get(name, ())) or "nothing",
            "runs": s["runs"],
            "scored on": (subsets or {}).get(name, "every run"),
            "instrument": ", ".join((instruments or {}).get(name, ())) or "none",
            "identification": _cell(ident["accuracy"]),
            "macro-recall": f"{ident['macro_recall']:.3f}",
        }
        for level in LEVELS:
            row[f"ident. {level}"] = _cell(ident["by_level"].get(level, scores.wilson(0, 0)))
        row["ident. reference recipe"] = _cell(scores.identification(classic)["accuracy"])
        row["ident. every step"] = _cell(scores.identification(every_step)["accuracy"])
        row["ident. tuned-on task"] = _cell(s["splits"]["tuned_on_task"]["identification"])
        row["ident. held-out tasks"] = _cell(s["splits"]["held_out_task"]["identification"])
        row["known faults not healthy"] = _cell(s["known_detection"])
        row["held-out faults not healthy"] = _cell(s["detection"]["not_healthy"])
        row["held-out faults other_fault"] = _cell(s["detection"]["other_fault"])
        row["alarm precision"] = _cell(s["alarm_precision"])
        row["false alarms drawn bases"] = _cell(s["false_alarms"])
        row["false alarms reference recipe"] = _cell(scores.false_alarms(classic))
        row["false alarms every step"] = _cell(scores.false_alarms(every_step))
        row["probe steps/diagnosis"] = f"{s['cost']['probe_steps']:.0f}"
        out.append(row)
    return out


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
    full = frame[
        (frame["grid"] == "full")
        & (frame["every"] == DEFAULT_EVERY)
        & (frame["kind"] != scores.HEALTHY)
    ]
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
    designs: pd.DataFrame | None = None,
    bases: Sequence[str] = (),
    extra: pd.DataFrame | None = None,
    instruments: Mapping[str, Sequence[str]] | None = None,
) -> list[Path]:
    """Write ``leaderboard.md`` (+ csv, per task, per variant), the false alarms per design
    axis (``false_alarms_by_axis.csv``, from ``designs``; see :func:`alarms_by_axis`) and the
    recall-by-level figure to ``out``. ``bases`` are the lines above the table (the drawn
    bases' redraws, the diagnosers a report left out and why);
    ``extra``: more columns, one row per diagnoser (the real-bug suite's, see realbugs.md).
    """
    from faultbench.reporting.report import markdown_table

    table = pd.DataFrame(rows(frame, tuned_on, subsets, instruments))
    if extra is not None:
        table = table.merge(extra, on="diagnoser", how="left").fillna("n/a")
    tasks = per_task(frame)
    axes = alarms_by_axis(designs if designs is not None else _no_designs())
    out.mkdir(parents=True, exist_ok=True)
    table.to_csv(out / "leaderboard.csv", index=False, lineterminator="\n")
    tasks.reset_index().to_csv(out / "leaderboard_tasks.csv", index=False, lineterminator="\n")
    per_variant(frame).to_csv(out / "leaderboard_variants.csv", index=False, lineterminator="\n")
    axes.to_csv(out / "false_alarms_by_axis.csv", index=False, lineterminator="\n")
    tested = ", ".join(dict.fromkeys(frame["task"]))
    on_full = ", ".join(dict.fromkeys(frame[frame["grid"] == "full"]["task"])) or "none"
    text = "\n".join(
        [
            "# Leaderboard",
            "",
            f"Every diagnoser on the same runs ({len(frame)} diagnoses; tasks: {tested}; "
            f"the full grid on: {on_full}). "
            "Cells are shares with their 95% Wilson interval. The headline is the *full grid*: "
            "every run trains on its own base recipe drawn from the task's family of healthy "
            "designs (optimizer, depth, widths, activation, normalization, dropout, batch size, "
            "schedule, clipping, weight decay, initialization), kept only if it trains healthy, "
            "and every variant at its calibrated mild, moderate and severe levels plus the "
            "held-out faults; each trace is read as the Monitor records it by default (every "
            f"{DEFAULT_EVERY}th step). *Reference recipe* columns are the classic grid (the "
            "task's one original recipe, the nine at their canonical severities); *every step* "
            "columns are the full grid read at every step (n/a for a diagnoser that never "
            "reads the trace, whose answers cannot depend on its sampling: one that replays "
            "the run through its probe, or reads its instrument's record). *Identification*: "
            "runs with one of "
            "the known faults, named correctly. *Known faults not healthy*: the same runs, "
            "any alarm. *Held-out faults*: runs with a bug outside the known ones; *not "
            "healthy* is detection, *other_fault* says it is none of them. *Alarm precision*: "
            "of the answers that are not healthy, the share on a faulty run. *False alarms*: "
            "healthy runs called anything else. *Instrument*: what rode in the training loop of "
            "the runs a diagnoser read (e.g. Cockpit attached live), none for a diagnoser that "
            "reads the finished run; what an instrument adds to a step is in timings.md and "
            "`faultbench bench`. Seconds per diagnosis are a wall-clock "
            "measurement of the machine that ran the report: they are in timings.md, so this "
            "file is the same on every machine.",
            "",
            *[f"- {line}" for line in bases],
            *([""] if bases else []),
            markdown_table(table),
            "",
            "## Identification accuracy per task",
            "",
            markdown_table(tasks.reset_index()),
            "",
            "Per variant (every level and seed of it): `leaderboard_variants.csv`. False alarms "
            "per value of each design axis, per diagnoser: `false_alarms_by_axis.csv`.",
            "",
            "![identification recall by severity level](leaderboard.png)",
            "",
        ]
    )
    (out / "leaderboard.md").write_text(text)
    _figure(
        frame[(frame["grid"] == "full") & (frame["every"] == DEFAULT_EVERY)],
        out / "leaderboard.png",
    )
    return [
        out / "leaderboard.md",
        out / "leaderboard.csv",
        out / "leaderboard_tasks.csv",
        out / "leaderboard_variants.csv",
        out / "false_alarms_by_axis.csv",
        out / "leaderboard.png",
    ]


def _no_designs() -> pd.DataFrame:
    return pd.DataFrame(columns=["diagnoser", "task", "seed", "axis", "value", "alarm"])


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
