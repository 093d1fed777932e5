"""The benchmark's validity: does the grid's ranking of diagnosers predict the real bugs'?

Over the shipped diagnosers, the rank correlation (Kendall's tau-b and Spearman's rho,
:mod:`scipy.stats`) between

- identification on the full grid and identification on the real-bug suite's
  known-label cases, and
- false alarms on the grid's healthy runs and false alarms on the suite's fixed twins,

each with a percentile bootstrap interval over cases: the suite's cases are drawn
with replacement (a case brings both its forms), the diagnosers' suite scores are
recomputed on the draw, and so is the correlation; the grid's scores stay as
measured (the grid is not resampled). A draw on which one side ties every diagnoser
has no correlation: it is left out and counted. The same statistics without the
baselines (constant and random answers) are given beside, since two anchors at the
ends of both rankings can make a correlation by themselves.

Then the cases on which grid and suite disagree most: per case and form, the mean over
diagnosers of what the grid promises (a diagnoser's full-grid recall of the case's
label; its detection of held-out faults for an out-of-list case; one minus its false
alarms for a fixed twin) against the share of diagnosers right on the case.

``validity.md``, ``validity.csv`` (the statistics, keyed by ``statistic`` for the
paper), ``validity_diagnosers.csv`` (the points), ``validity_cases.csv`` (every case
and form's gap) and ``validity.png`` (the scatter) are written with stable bytes.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats

from faultbench.faults.fault import HEALTHY, OTHER_FAULT
from faultbench.scoring import scores

REPS = 2000  # bootstrap draws of the cases
SEED = 20250131  # the bootstrap's seed: the intervals are the same on every machine
LEVEL = 0.95  # the intervals' coverage
GRID_COLUMNS = ("identification", "false_alarms", "not_healthy")  # plus recall:<label>
#: (name, grid column, suite score) of the two rankings compared.
MEASURES = (
    ("identification", "identification", "identification on known-label cases"),
    ("false_alarms", "false_alarms", "false alarms on fixed twins"),
)
TOP = 8  # disagreements shown in validity.md, per form


def is_baseline(name: str) -> bool:
    """Whether a registered diagnoser is one of the shipped baselines (constant, random)."""
    from faultbench.scoring.diagnosis import get_diagnoser

    return type(get_diagnoser(name)).__module__.endswith(".baselines")


def grid_rates(board: pd.DataFrame) -> pd.DataFrame:
    """Per diagnoser, from the leaderboard's scored runs: full-grid identification, false
    alarms, held-out detection (not healthy) and recall per known label (``recall:<label>``).

    The full grid's runs when the board has them, else all its runs (as the leaderboard).
    """
    rows = []
    for name in dict.fromkeys(board["diagnoser"]):
        part = board[board["diagnoser"] == name]
        full = part[part["grid"] == "full"]
        part = full if len(full) else part
        ident = scores.identification(part)
        row = {
            "diagnoser": name,
            "identification": ident["accuracy"].value,
            "false_alarms": scores.false_alarms(part).value,
            "not_healthy": scores.detection(part)["not_healthy"].value,
        }
        row.update({f"recall:{label}": share.value for label, share in ident["recall"].items()})
        rows.append(row)
    return pd.DataFrame(rows).set_index("diagnoser")


def _value(text: str) -> float:
    """The value of a leaderboard cell, "0.160 [0.14, 0.19]" -> 0.16 ("n/a" -> nan)."""
    head = str(text).split(" ", 1)[0]
    try:
        return float(head)
    except ValueError:
        return math.nan


def grid_rates_from_results(results: Path) -> pd.DataFrame:
    """:func:`grid_rates` read back from a results directory's leaderboard CSVs.

    Identification, false alarms and detection are the leaderboard's cells; a label's
    recall is the unweighted mean of its variants' cells over tasks
    (``leaderboard_variants.csv``, which holds no run counts): close to the pooled
    recall, not equal to it. For measuring without the grid's runs at hand.
    """
    board = pd.read_csv(results / "leaderboard.csv", dtype=str, keep_default_na=False)
    variants = pd.read_csv(results / "leaderboard_variants.csv", dtype=str, keep_default_na=False)
    variants = variants[variants["kind"] == "known: named"]
    rows = []
    for r in board.to_dict("records"):
        row = {
            "diagnoser": r["diagnoser"],
            "identification": _value(r["identification"]),
            "false_alarms": _value(r["false alarms"]),
            "not_healthy": _value(r["held-out faults not healthy"]),
        }
        mine = variants[variants["diagnoser"] == r["diagnoser"]]
        label = mine["variant"].str.split(".").str[0]
        for name, group in mine.groupby(label, sort=False):
            row[f"recall:{name}"] = float(np.nanmean([_value(v) for v in group["share"]]))
        rows.append(row)
    return pd.DataFrame(rows).set_index("diagnoser")


@dataclass(frozen=True)
class SuiteMatrix:
    """Every diagnoser's outcome on every case, as arrays (rows: diagnosers, columns: cases)."""

    diagnosers: tuple[str, ...]
    cases: tuple[str, ...]
    labels: tuple[str, ...]  # each case's label
    named: np.ndarray  # faulty form answered with the case's label (status ok)
    detected: np.ndarray  # faulty form answered, not healthy
    alarmed: np.ndarray  # fixed twin answered, not healthy (a false alarm)
    quiet: np.ndarray  # fixed twin answered healthy

    @property
    def known(self) -> np.ndarray:
        """Which cases carry one of the nine known labels."""
        return np.array([label != OTHER_FAULT for label in self.labels])

    def identification(self, draw: np.ndarray | None = None) -> np.ndarray:
        """Per diagnoser: share of the (drawn) known-label cases named correctly."""
        take = np.arange(len(self.cases)) if draw is None else draw
        take = take[self.known[take]]
        return (
            self.named[:, take].mean(axis=1) if len(take) else np.full(len(self.diagnosers), np.nan)
        )

    def false_alarms(self, draw: np.ndarray | None = None) -> np.ndarray:
        """Per diagnoser: share of the (drawn) cases' fixed twins called anything else."""
        take = np.arange(len(self.cases)) if draw is None else draw
        return self.alarmed[:, take].mean(axis=1)

    def score(self, measure: str, draw: np.ndarray | None = None) -> np.ndarray:
        """``identification`` or ``false_alarms`` on the (drawn) cases."""
        return self.identification(draw) if measure == "identification" else self.false_alarms(draw)


def suite_matrix(answers: pd.DataFrame, diagnosers: Sequence[str]) -> SuiteMatrix:
    """The outcomes of ``diagnosers`` (each must have answered every case) as arrays."""
    cases = tuple(dict.fromkeys(answers["case"]))
    first = answers.drop_duplicates("case").set_index("case")
    shape = (len(diagnosers), len(cases))
    named, detected, alarmed, quiet = (np.zeros(shape, dtype=bool) for _ in range(4))
    index = {c: j for j, c in enumerate(cases)}
    row_of = {d: i for i, d in enumerate(diagnosers)}
    for r in answers.itertuples(index=False):
        i, j = row_of.get(r.diagnoser), index[r.case]
        if i is None:
            continue
        answered = r.status == "ok"
        if r.form == "faulty":
            named[i, j] = answered and r.predicted == r.label
            detected[i, j] = answered and r.predicted != HEALTHY
        else:
            alarmed[i, j] = answered and r.predicted != HEALTHY
            quiet[i, j] = answered and r.predicted == HEALTHY
    counts = answers[answers["diagnoser"].isin(diagnosers)].groupby("diagnoser").size()
    missing = [d for d in diagnosers if counts.get(d, 0) != 2 * len(cases)]
    if missing:
        raise ValueError(
            f"diagnosers {missing} did not answer both forms of all {len(cases)} cases"
        )
    labels = tuple(str(first.loc[c, "label"]) for c in cases)
    return SuiteMatrix(tuple(diagnosers), cases, labels, named, detected, alarmed, quiet)


def correlations(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """Kendall's tau-b and Spearman's rho of ``x`` and ``y`` (nan where one side is constant)."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if len(x) < 3 or np.ptp(x) == 0 or np.ptp(y) == 0 or not np.isfinite([*x, *y]).all():
        return math.nan, math.nan
    tau = stats.kendalltau(x, y).statistic  # tau-b: ties on either side are accounted for
    rho = stats.spearmanr(x, y).statistic
    return float(tau), float(rho)


@dataclass(frozen=True)
class Statistic:
    """One correlation with its bootstrap interval."""

    statistic: str  # e.g. "identification kendall_tau"
    diagnosers: int  # how many diagnosers were ranked
    cases: int  # cases the suite side was measured on
    value: float  # on the suite as shipped
    low: float  # percentile bootstrap interval
    high: float
    reps: int  # bootstrap draws with a defined correlation
    undefined: int  # draws on which one side tied every diagnoser

    def row(self) -> dict[str, object]:
        """The CSV row (numbers with three decimals: stable bytes)."""

        def fmt(v: float) -> str:
            return "" if math.isnan(v) else f"{v:.3f}"

        return {
            "statistic": self.statistic,
            "diagnosers": self.diagnosers,
            "cases": self.cases,
            "value": fmt(self.value),
            "low": fmt(self.low),
            "high": fmt(self.high),
            "reps": self.reps,
            "undefined": self.undefined,
        }


def bootstrap(
    grid: pd.DataFrame,
    suite: SuiteMatrix,
    *,
    reps: int = REPS,
    seed: int = SEED,
    suffix: str = "",
) -> list[Statistic]:
    """Tau and rho for each of :data:`MEASURES`, with percentile intervals over case draws."""
    rng = np.random.default_rng(seed)
    n = len(suite.cases)
    draws = rng.integers(0, n, size=(reps, n))
    out = []
    for measure, column, _ in MEASURES:
        x = grid.loc[list(suite.diagnosers), column].to_numpy(dtype=float)
        tau, rho = correlations(x, suite.score(measure))
        taus, rhos = np.full(reps, np.nan), np.full(reps, np.nan)
        for k in range(reps):
            taus[k], rhos[k] = correlations(x, suite.score(measure, draws[k]))
        cases = int(suite.known.sum()) if measure == "identification" else n
        for kind, value, drawn in (("kendall_tau", tau, taus), ("spearman_rho", rho, rhos)):
            defined = drawn[~np.isnan(drawn)]
            tail = 100 * (1 - LEVEL) / 2
            low, high = (
                np.percentile(defined, [tail, 100 - tail]) if len(defined) else (math.nan, math.nan)
            )
            out.append(
                Statistic(
                    f"{measure} {kind}{suffix}",
                    len(suite.diagnosers),
                    cases,
                    value,
                    float(low),
                    float(high),
                    len(defined),
                    reps - len(defined),
                )
            )
    return out


def disagreements(grid: pd.DataFrame, suite: SuiteMatrix) -> pd.DataFrame:
    """Per case and form: what the grid promises on it (mean over diagnosers), what the
    suite gives (share of diagnosers right), and the gap, largest first."""
    rows = []
    grid = grid.loc[list(suite.diagnosers)]
    for j, (case, label) in enumerate(zip(suite.cases, suite.labels, strict=True)):
        if label == OTHER_FAULT:
            promised, given = grid["not_healthy"], suite.detected[:, j]
            what = "held-out detection (not healthy)"
        else:
            column = f"recall:{label}"
            promised = grid[column] if column in grid else pd.Series(np.nan, index=grid.index)
            given, what = suite.named[:, j], f"recall of {label}"
        for form, expect, got, means in (
            ("faulty", promised.to_numpy(dtype=float), given, what),
            (
                "fixed",
                1.0 - grid["false_alarms"].to_numpy(dtype=float),
                suite.quiet[:, j],
                "1 - false alarms",
            ),
        ):
            grid_mean, suite_mean = float(np.nanmean(expect)), float(np.mean(got))
            rows.append(
                {
                    "case": case,
                    "form": form,
                    "label": label if form == "faulty" else HEALTHY,
                    "grid promises": grid_mean,
                    "suite gives": suite_mean,
                    "gap": grid_mean - suite_mean,
                    "right": f"{int(np.sum(got))}/{len(got)}",
                    "grid's measure": means,
                }
            )
    frame = pd.DataFrame(rows)
    order = np.argsort(-frame["gap"].abs().to_numpy(), kind="stable")
    return frame.iloc[order].reset_index(drop=True)


def measure(
    grid: pd.DataFrame,
    answers: pd.DataFrame,
    *,
    reps: int = REPS,
    seed: int = SEED,
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """The statistics, the per-diagnoser points and the per-case gaps.

    Ranks the diagnosers present on both sides (in the grid's order).
    """
    names = [d for d in grid.index if d in set(answers["diagnoser"])]
    suite = suite_matrix(answers, names)
    found = bootstrap(grid, suite, reps=reps, seed=seed)
    real = [d for d in names if not is_baseline(d)]
    if len(real) < len(names):
        found += bootstrap(
            grid, suite_matrix(answers, real), reps=reps, seed=seed, suffix=" (no baselines)"
        )
    statistics = pd.DataFrame([s.row() for s in found])
    points = pd.DataFrame(
        {
            "diagnoser": names,
            "baseline": [is_baseline(d) for d in names],
            "grid identification": grid.loc[names, "identification"].to_numpy(dtype=float),
            "suite identification": suite.identification(),
            "grid false alarms": grid.loc[names, "false_alarms"].to_numpy(dtype=float),
            "suite false alarms": suite.false_alarms(),
        }
    )
    return statistics, points, disagreements(grid, suite)


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
