"""How early each diagnoser knows: its scores on runs cut at 10%, 25% and 50% of their steps.

Every diagnoser is also scored on the full grid at the default sampling with each run
cut at a share of its steps (:data:`faultbench.scoring.board.PREFIXES`; the trace, the
evaluations and the summaries as a run stopped there would have them,
:meth:`faultbench.training.trace.Trace.prefix`). The table gives, per diagnoser and
share (1.0: the whole run): identification, false alarms and the share answered
``undecided`` (never right, never an alarm: :func:`faultbench.scoring.scores.undecided`),
each with its 95% Wilson interval; the figure draws them as curves.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from faultbench.reporting.leaderboard import cell
from faultbench.scoring import scores
from faultbench.scoring.board import DEFAULT_EVERY

COLUMNS = ("diagnoser", "prefix", "runs", "identification", "false alarms", "undecided")
#: Each panel of the figure: the column it draws and its line style.
CURVES = (("identification", "-"), ("false alarms", "--"), ("undecided", ":"))


def _full(frame: pd.DataFrame) -> pd.DataFrame:
    """The answers of the full grid at the default sampling (every prefix)."""
    return frame[(frame["grid"] == "full") & (frame["every"] == DEFAULT_EVERY)]


def _shares(part: pd.DataFrame) -> dict[str, scores.Share]:
    return {
        "identification": scores.identification(part)["accuracy"],
        "false alarms": scores.false_alarms(part),
        "undecided": scores.undecided(part),
    }


def table(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per diagnoser and prefix (in the files' order, shortest prefix first): the
    runs scored, identification, false alarms and the undecided share, with intervals."""
    full = _full(frame)
    rows = []
    for (name, prefix), part in full.groupby(["diagnoser", "prefix"], sort=False):
        shares = _shares(part)
        rows.append(
            {
                "diagnoser": name,
                "prefix": float(prefix),
                "runs": len(part),
                **{column: cell(share) for column, share in shares.items()},
            }
        )
    out = pd.DataFrame(rows, columns=list(COLUMNS))
    order = {name: i for i, name in enumerate(dict.fromkeys(full["diagnoser"]))}
    return out.sort_values(
        ["diagnoser", "prefix"], key=lambda c: c.map(order) if c.name == "diagnoser" else c
    ).reset_index(drop=True)


def markdown(found: pd.DataFrame) -> str:
    """The table as ``leaderboard_full.md``'s section on how early each diagnoser knows."""
    if found.empty:
        return ""
    shown = found.assign(prefix=[f"{p:.0%}" for p in found["prefix"]])
    return "\n".join(
        [
            "## How early it knows",
            "",
            "The full grid at the default sampling, each run cut at a share of its steps as a "
            "run stopped there would have it (its trace, evaluations and end-of-run summaries "
            "then; an instrument's record cannot be cut, so a diagnoser that reads one answers "
            "*undecided* there). *Undecided* is never right and never an alarm; its share is "
            "of every run.",
            "",
            shown.to_markdown(index=False, disable_numparse=True),
            "",
            "![scores by the share of the run read](leaderboard_prefixes.png)",
            "",
        ]
    )


def figure(frame: pd.DataFrame, path: Path) -> Path:
    """Identification, false alarms and the undecided share against the share of the run
    read, one colour per diagnoser (values only: the table has the intervals)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    full = _full(frame)
    fig, axes = plt.subplots(1, len(CURVES), figsize=(11, 3.8), sharex=True, sharey=True)
    for name, mine in full.groupby("diagnoser", sort=False):
        points = sorted(
            (float(prefix), _shares(part)) for prefix, part in mine.groupby("prefix", sort=True)
        )
        xs = [x for x, _ in points]
        for ax, (column, style) in zip(axes, CURVES, strict=True):
            ax.plot(xs, [s[column].value for _, s in points], style, marker="o", ms=3, label=name)
    for ax, (column, _) in zip(axes, CURVES, strict=True):
        ax.set_title(column)
        ax.set_xlabel("share of the run's steps read")
        ax.set_xlim(0, 1.05)
        ax.set_ylim(-0.02, 1.02)
        ax.grid(alpha=0.3)
    if not full.empty:
        axes[-1].legend(fontsize=6, loc="upper right", ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=120, metadata={"Software": None})  # no version stamp: stable bytes
    plt.close(fig)
    return path
