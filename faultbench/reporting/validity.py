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

:mod:`faultbench.reporting.validity_files` writes them to ``results/``.
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
from faultbench.training.monitor import DEFAULT_EVERY

REPS = 2000  # bootstrap draws of the cases
SEED = 20250131  # the bootstrap's seed: the intervals are the same on every machine
LEVEL = 0.95  # the intervals' coverage
#: (name, grid column, suite score) of the two rankings compared.
MEASURES = (
    ("identification", "identification", "identification on known-label cases"),
    ("false_alarms", "false_alarms", "false alarms on fixed twins"),
)


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
        full = part[(part["grid"] == "full") & (part["every"] == DEFAULT_EVERY)]
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
            "false_alarms": _value(r["false alarms drawn bases"]),
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
            detected[i, j] = answered and scores.raises_alarm(r.predicted)
        else:
            alarmed[i, j] = answered and scores.raises_alarm(r.predicted)
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
