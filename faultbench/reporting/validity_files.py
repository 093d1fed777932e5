"""``results/validity.*``: the statistics of :mod:`faultbench.reporting.validity`, written.

``validity.md``, ``validity.csv`` (the statistics, keyed by ``statistic`` for the
paper), ``validity_diagnosers.csv`` (the points), ``validity_cases.csv`` (every case
and form's gap) and ``validity.png`` (the scatter, one point per diagnoser) are
written with stable bytes: the same runs give the same files on every machine.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from faultbench.reporting.validity import LEVEL, MEASURES, REPS, SEED, measure

TOP = 8  # disagreements shown in validity.md, per form


def _fmt(frame: pd.DataFrame) -> pd.DataFrame:
    """Floats with three decimals (stable bytes)."""
    return frame.apply(lambda col: col.map(lambda v: f"{v:.3f}" if isinstance(v, float) else v))


def markdown(
    statistics: pd.DataFrame, points: pd.DataFrame, gaps: pd.DataFrame, *, source: str
) -> str:
    """``validity.md``."""
    from faultbench.reporting.report import markdown_table

    shown = statistics.copy()
    shown["95% interval"] = [
        "n/a" if not low else f"[{low}, {high}]" for low, high in zip(shown["low"], shown["high"])
    ]
    shown = shown[
        ["statistic", "diagnosers", "cases", "value", "95% interval", "reps", "undefined"]
    ]
    faulty = _fmt(gaps[gaps["form"] == "faulty"].head(TOP))
    fixed = _fmt(gaps[gaps["form"] == "fixed"].head(TOP))
    return "\n".join(
        [
            "# Does the grid predict real bugs?",
            "",
            "Over the shipped diagnosers, the rank correlation between their scores on the "
            f"full grid ({source}) and on the real-bug suite (`realbugs.md`): identification "
            "on the grid against identification on the suite's known-label cases, and false "
            "alarms on the grid's healthy runs against false alarms on the suite's fixed "
            "twins. Kendall's tau-b and Spearman's rho, each with a "
            f"{LEVEL:.0%} percentile bootstrap interval over the suite's cases ({REPS} draws "
            f"of the cases with replacement, seed {SEED}; the grid's scores are held as "
            "measured). *undefined*: draws on which one side tied every diagnoser (no "
            "correlation), left out. *(no baselines)*: the same without the constant and "
            "random baselines, which sit at the ends of both rankings.",
            "",
            markdown_table(shown),
            "",
            "## The diagnosers",
            "",
            markdown_table(_fmt(points)),
            "",
            "![grid against real bugs, one point per diagnoser](validity.png)",
            "",
            f"## Where grid and suite disagree most (top {TOP} per form; all: "
            "`validity_cases.csv`)",
            "",
            "Per case and form, averaged over the diagnosers: what the grid promises (a "
            "diagnoser's full-grid recall of the case's label; its detection of held-out "
            "faults for an out-of-list case; one minus its false alarms for a fixed twin) "
            "against the share of diagnosers that were right on it. A positive gap: the "
            "grid promised more than the real bug gave.",
            "",
            "Faulty forms:",
            "",
            markdown_table(faulty),
            "",
            "Fixed twins:",
            "",
            markdown_table(fixed),
            "",
        ]
    )


def figure(points: pd.DataFrame, statistics: pd.DataFrame, path: Path) -> Path:
    """The scatter: grid against suite, one point per diagnoser, for both measures."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    values = dict(zip(statistics["statistic"], statistics["value"], strict=True))
    fig, axes = plt.subplots(1, 2, figsize=(10, 4.6))
    for ax, (measure_, _, suite_name) in zip(axes, MEASURES, strict=True):
        words = measure_.replace("_", " ")
        x, y = points[f"grid {words}"], points[f"suite {words}"]
        ax.plot([0, 1], [0, 1], color="0.8", lw=1, zorder=0)
        ax.scatter(x, y, c=["0.5" if b else "C0" for b in points["baseline"]], zorder=2)
        for (xi, yi), text, offset, align in _placed(_labels(points["diagnoser"], x, y)):
            ax.annotate(
                text,
                (xi, yi),
                fontsize=7,
                xytext=offset,
                textcoords="offset points",
                ha=align,
                arrowprops={"arrowstyle": "-", "lw": 0.4, "color": "0.6", "shrinkA": 0},
            )
        tau = values.get(f"{measure_} kendall_tau", "")
        rho = values.get(f"{measure_} spearman_rho", "")
        ax.set_title(f"{words}: tau {tau or 'n/a'}, rho {rho or 'n/a'}", fontsize=10)
        ax.set_xlabel(f"full grid: {words}")
        ax.set_ylabel(f"real bugs: {suite_name}")
        ax.set_xlim(-0.03, 1.03)
        ax.set_ylim(-0.03, 1.03)
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120, metadata={"Software": None})  # no version stamp: stable bytes
    plt.close(fig)
    return path


def _labels(
    names: pd.Series, x: pd.Series, y: pd.Series
) -> list[tuple[tuple[float, float], list[str]]]:
    """One label per point, the names of diagnosers at the same point joined; by x, then y."""
    at: dict[tuple[float, float], list[str]] = {}
    for name, xi, yi in zip(names, x, y, strict=True):
        at.setdefault((round(float(xi), 3), round(float(yi), 3)), []).append(str(name))
    return sorted(at.items())


#: Where a point's label may go (offset in points, alignment), tried in this order.
SPOTS = (
    ((5, 3), "left"),
    ((5, -10), "left"),
    ((-5, 3), "right"),
    ((-5, -10), "right"),
    ((10, 14), "left"),
    ((10, -22), "left"),
    ((-10, 14), "right"),
    ((-10, -22), "right"),
)
PT = (0.0036, 0.004)  # one point in data units of the scatter's axes (about 1.06 / 300 pt)
CHAR = 4.0  # points per character at fontsize 7


def _placed(
    labels: list[tuple[tuple[float, float], list[str]]],
) -> list[tuple[tuple[float, float], str, tuple[int, int], str]]:
    """Each label at the first spot whose box overlaps no label placed before it."""
    boxes: list[tuple[float, float, float, float]] = []
    out = []
    for (xi, yi), names in labels:
        text = ", ".join(names)
        width, height = len(text) * CHAR * PT[0], 8 * PT[1]
        for offset, align in SPOTS:
            left = xi + offset[0] * PT[0] - (width if align == "right" else 0.0)
            bottom = yi + offset[1] * PT[1]
            box = (left, bottom, left + width, bottom + height)
            clear = all(
                box[2] < b[0] or b[2] < box[0] or box[3] < b[1] or b[3] < box[1] for b in boxes
            )
            if clear:
                break
        boxes.append(box)
        out.append(((xi, yi), text, offset, align))
    return out


def write(
    grid: pd.DataFrame,
    answers: pd.DataFrame,
    out: Path,
    *,
    source: str = "`leaderboard.csv`",
    reps: int = REPS,
    seed: int = SEED,
) -> list[Path]:
    """Write ``validity.md``, its three CSVs and ``validity.png`` under ``out``."""
    statistics, points, gaps = measure(grid, answers, reps=reps, seed=seed)
    out.mkdir(parents=True, exist_ok=True)
    frames = {
        "validity.csv": statistics,
        "validity_diagnosers.csv": _fmt(points),
        "validity_cases.csv": _fmt(gaps),
    }
    written = []
    for name, frame in frames.items():
        frame.to_csv(out / name, index=False, lineterminator="\n")
        written.append(out / name)
    (out / "validity.md").write_text(markdown(statistics, points, gaps, source=source))
    written.append(figure(points, statistics, out / "validity.png"))
    return [out / "validity.md", *written]
