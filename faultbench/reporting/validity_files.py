"""``results/validity.*``: the statistics of :mod:`faultbench.reporting.validity`, written.

``validity.md``, ``validity.csv`` (the statistics per form and kind, keyed by
``statistic`` for the paper), ``validity_diagnosers.csv`` (the points),
``validity_kinds.csv`` (each diagnoser's suite shares per kind, with Wilson intervals),
``validity_cases.csv`` (every case and form's gap) and ``validity.png`` (the scatter, one
point per diagnoser) are written with stable bytes: the same runs give the same files on
every machine.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from faultbench.reporting.validity import (
    ALL,
    LEVEL,
    MEASURES,
    MIN_CASES,
    REPS,
    SEED,
    Validity,
    measure,
)

TOP = 8  # disagreements shown in validity.md, per form


def _fmt(frame: pd.DataFrame) -> pd.DataFrame:
    """Floats with three decimals (stable bytes)."""
    return frame.apply(lambda col: col.map(lambda v: f"{v:.3f}" if isinstance(v, float) else v))


def _statistics_table(statistics: pd.DataFrame) -> pd.DataFrame:
    shown = statistics.copy()
    shown["95% interval"] = [
        "n/a" if not low else f"[{low}, {high}]" for low, high in zip(shown["low"], shown["high"])
    ]
    return shown[
        ["statistic", "kind", "diagnosers", "cases", "value", "95% interval", "reps", "undefined"]
    ]


def _kind_matrix(kinds: pd.DataFrame, measure_: str) -> pd.DataFrame:
    """Diagnosers by kind: the suite's share on that kind, with its hits out of n."""
    cells = kinds.assign(
        cell=[
            "n/a" if not n else f"{v:.2f} ({h}/{n})"
            for v, h, n in zip(
                kinds[measure_], kinds[f"{measure_}_hits"], kinds[f"{measure_}_n"], strict=True
            )
        ]
    )
    return cells.pivot(index="diagnoser", columns="kind", values="cell").reset_index()


def markdown(found: Validity, *, source: str) -> str:
    """``validity.md``."""
    from faultbench.reporting.report import markdown_table

    stats_ = found.statistics
    by_form = {form: stats_[stats_["form"] == form] for form in ("faulty", "fixed")}
    known = ", ".join(f"{label} {n}" for label, n in found.known_labels.items())
    kinds = ", ".join(f"{kind} {n}" for kind, n in found.case_kinds.items())
    gaps = found.gaps
    faulty = _fmt(gaps[gaps["form"] == "faulty"].head(TOP))
    fixed = _fmt(gaps[gaps["form"] == "fixed"].head(TOP))
    return "\n".join(
        [
            "# Does the grid predict real bugs?",
            "",
            "Over the shipped diagnosers, the rank correlation between their scores on the "
            f"full grid ({source}) and on the real-bug suite (`realbugs.md`), per form of the "
            "suite's cases. Faulty forms: identification on the grid against identification "
            "on the suite's known-label cases, and the grid's detection of held-out faults "
            "against the out-of-list cases not called healthy. Fixed twins: false alarms on "
            "the grid's healthy runs against false alarms on the twins. Each over every case "
            f"(kind `{ALL}`), then over the cases of each task kind that has at least "
            f"{MIN_CASES} for it. Kendall's tau-b and Spearman's rho, each with a "
            f"{LEVEL:.0%} percentile bootstrap interval over the suite's cases "
            f"(scipy.stats.bootstrap, {REPS} draws of the cases with replacement, seed {SEED}; "
            "the grid's scores are held as measured). *undefined*: draws on which one side "
            "tied every diagnoser (no correlation), left out. *(no baselines)*: the same "
            "without the constant and random baselines, which sit at the ends of both "
            "rankings.",
            "",
            f"Known-label cases, by label: {known}. Cases by task kind: {kinds}.",
            "",
            "## Faulty forms",
            "",
            markdown_table(_statistics_table(by_form["faulty"])),
            "",
            "## Fixed twins",
            "",
            markdown_table(_statistics_table(by_form["fixed"])),
            "",
            "## The diagnosers",
            "",
            markdown_table(_fmt(found.points)),
            "",
            "![grid against real bugs, one point per diagnoser](validity.png)",
            "",
            "## The suite per kind",
            "",
            "Each diagnoser's share on the cases of each kind, with hits out of cases (95% "
            "Wilson intervals: `validity_kinds.csv`).",
            "",
            "Identification (known-label cases' faulty forms named correctly):",
            "",
            markdown_table(_kind_matrix(found.kinds, "identification")),
            "",
            "False alarms (fixed twins called anything but healthy):",
            "",
            markdown_table(_kind_matrix(found.kinds, "false_alarms")),
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
    shown = [m for m in MEASURES if m[0] in ("identification", "false_alarms")]
    for ax, (measure_, _, _, suite_name) in zip(axes, shown, strict=True):
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
    """Write ``validity.md``, its four CSVs and ``validity.png`` under ``out``."""
    found = measure(grid, answers, reps=reps, seed=seed)
    out.mkdir(parents=True, exist_ok=True)
    frames = {
        "validity.csv": found.statistics,
        "validity_diagnosers.csv": _fmt(found.points),
        "validity_kinds.csv": _fmt(found.kinds),
        "validity_cases.csv": _fmt(found.gaps),
    }
    written = []
    for name, frame in frames.items():
        frame.to_csv(out / name, index=False, lineterminator="\n")
        written.append(out / name)
    (out / "validity.md").write_text(markdown(found, source=source))
    written.append(figure(found.points, found.statistics, out / "validity.png"))
    return [out / "validity.md", *written]
