"""The benchmark's validity: does the grid's ranking of diagnosers predict the real bugs'?

Over the shipped diagnosers, the rank correlation (Kendall's tau-b and Spearman's rho,
:mod:`scipy.stats`) between a score on the full grid and the same score on the real-bug
suite, per form of the suite's cases:

- faulty forms: identification on the grid against identification on the cases whose
  bug has a known label (every label the grid injects, a language model's included), and
  the grid's detection of held-out faults against the out-of-list (``other_fault``)
  cases' faulty forms not called healthy;
- fixed twins: false alarms on the grid's healthy runs against false alarms on the twins;

on all cases, then on the cases of each task kind (multiclass, regression, ...), each with
a percentile bootstrap interval over cases (:func:`scipy.stats.bootstrap`): the suite's
cases are drawn with replacement (a case brings both its forms), the diagnosers' suite
scores are recomputed on the draw, and so is the correlation; the grid's scores stay as
measured (the grid is not resampled). A draw on which one side ties every diagnoser has
no correlation: it is left out and counted. The same statistics without the baselines
(constant and random answers) are given beside, since two anchors at the ends of both
rankings can make a correlation by themselves. Beside them, each diagnoser's suite shares
per kind with their Wilson intervals (:mod:`faultbench.scoring.stats`).

Then the cases on which grid and suite disagree most: per case and form, the mean over
diagnosers of what the grid promises (a diagnoser's full-grid recall of the case's
label; its detection of held-out faults for an out-of-list case; one minus its false
alarms for a fixed twin) against the share of diagnosers right on the case.

:mod:`faultbench.reporting.validity_files` writes them to ``results/``.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats

from faultbench.faults.fault import HEALTHY, OTHER_FAULT
from faultbench.scoring import scores
from faultbench.scoring.stats import BOOTSTRAP_REPS, BOOTSTRAP_SEED, CONFIDENCE, wilson
from faultbench.training.monitor import DEFAULT_EVERY

# the statistics module's draws, seed and coverage: the intervals are the same on every machine
REPS = BOOTSTRAP_REPS  # bootstrap draws of the cases
SEED = BOOTSTRAP_SEED
LEVEL = CONFIDENCE  # the intervals' coverage
ALL = "all"  # the kind column's value for statistics over every case
MIN_CASES = 3  # a kind's measure is correlated only over at least this many cases
#: (name, form, grid column, suite score) of the rankings compared.
MEASURES = (
    ("identification", "faulty", "identification", "identification on known-label cases"),
    ("out_of_list", "faulty", "not_healthy", "out-of-list cases not called healthy"),
    ("false_alarms", "fixed", "false_alarms", "false alarms on fixed twins"),
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
    kinds: tuple[str, ...]  # each case's task kind
    named: np.ndarray  # faulty form answered with the case's label (status ok)
    detected: np.ndarray  # faulty form answered, not healthy
    alarmed: np.ndarray  # fixed twin answered, not healthy (a false alarm)
    quiet: np.ndarray  # fixed twin answered healthy

    @property
    def known(self) -> np.ndarray:
        """Which cases carry a known label (any the grid injects: not ``other_fault``)."""
        return np.array([label != OTHER_FAULT for label in self.labels])

    def _mean(self, values: np.ndarray, take: np.ndarray) -> np.ndarray:
        if not len(take):
            return np.full(len(self.diagnosers), np.nan)
        return values[:, take].mean(axis=1)

    def _take(self, draw: np.ndarray | None) -> np.ndarray:
        return np.arange(len(self.cases)) if draw is None else np.asarray(draw)

    def identification(self, draw: np.ndarray | None = None) -> np.ndarray:
        """Per diagnoser: share of the (drawn) known-label cases named correctly."""
        take = self._take(draw)
        return self._mean(self.named, take[self.known[take]])

    def out_of_list(self, draw: np.ndarray | None = None) -> np.ndarray:
        """Per diagnoser: share of the (drawn) out-of-list cases not called healthy."""
        take = self._take(draw)
        return self._mean(self.detected, take[~self.known[take]])

    def false_alarms(self, draw: np.ndarray | None = None) -> np.ndarray:
        """Per diagnoser: share of the (drawn) cases' fixed twins called anything else."""
        return self._mean(self.alarmed, self._take(draw))

    def score(self, measure: str, draw: np.ndarray | None = None) -> np.ndarray:
        """One of :data:`MEASURES`' names on the (drawn) cases."""
        scorer = {
            "identification": self.identification,
            "out_of_list": self.out_of_list,
            "false_alarms": self.false_alarms,
        }[measure]
        return scorer(draw)

    def cases_of(self, measure: str) -> int:
        """How many cases a measure is taken over."""
        if measure == "identification":
            return int(self.known.sum())
        return int((~self.known).sum()) if measure == "out_of_list" else len(self.cases)

    def of_kind(self, kind: str) -> SuiteMatrix:
        """The same matrix on the cases of one task kind only."""
        keep = np.array([k == kind for k in self.kinds])
        pick = np.flatnonzero(keep)
        return replace(
            self,
            cases=tuple(self.cases[j] for j in pick),
            labels=tuple(self.labels[j] for j in pick),
            kinds=tuple(self.kinds[j] for j in pick),
            named=self.named[:, keep],
            detected=self.detected[:, keep],
            alarmed=self.alarmed[:, keep],
            quiet=self.quiet[:, keep],
        )


def case_kinds(answers: pd.DataFrame) -> dict[str, str]:
    """Each case's task kind: the answers' ``task_kind`` column, else the suite's own case."""
    if "task_kind" in answers:
        first = answers.drop_duplicates("case")
        return dict(zip(first["case"], first["task_kind"], strict=True))
    from faultbench.realbugs import get_case

    return {case: get_case(case).kind for case in dict.fromkeys(answers["case"])}


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
    kind_of = case_kinds(answers)
    kinds = tuple(kind_of[c] for c in cases)
    return SuiteMatrix(tuple(diagnosers), cases, labels, kinds, named, detected, alarmed, quiet)


def correlations(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """Kendall's tau-b and Spearman's rho of ``x`` and ``y`` (nan where one side is constant)."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if len(x) < 3 or np.ptp(x) == 0 or np.ptp(y) == 0 or not np.isfinite([*x, *y]).all():
        return math.nan, math.nan
    tau = stats.kendalltau(x, y).statistic  # tau-b: ties on either side are accounted for
    rho = stats.spearmanr(x, y).statistic
    return float(tau), float(rho)


def draw_correlations(x: np.ndarray, ys: np.ndarray) -> np.ndarray:
    """:func:`correlations` of ``x`` with each row of ``ys`` (draws x diagnosers) at once, as
    an array (2, draws): tau-b from the pairs' signs with scipy's formula and rho as scipy's
    ``spearmanr`` computes it (``np.corrcoef`` of the ranks), so each value is the one
    :func:`correlations` gives (a report bootstraps 32,000 draws; one call each took most
    of a warm report's statistics)."""
    x, ys = np.asarray(x, dtype=float), np.atleast_2d(np.asarray(ys, dtype=float))
    out = np.full((2, len(ys)), math.nan)
    if len(x) < 3 or not np.isfinite(x).all() or np.ptp(x) == 0:
        return out
    defined = np.isfinite(ys).all(axis=1)
    defined[defined] = np.ptp(ys[defined], axis=1) > 0
    ys = ys[defined]
    i, j = np.triu_indices(len(x), k=1)
    sx, sy = np.sign(x[i] - x[j]), np.sign(ys[:, i] - ys[:, j])
    pairs, x_ties, y_ties = len(i), np.sum(sx == 0), np.sum(sy == 0, axis=1)
    concordant_minus_discordant = (sx * sy).sum(axis=1)  # whole numbers: exact
    tau = concordant_minus_discordant / np.sqrt(pairs - x_ties) / np.sqrt(pairs - y_ties)
    out[0, defined] = np.clip(tau, -1.0, 1.0)
    x_ranks = stats.rankdata(x)
    out[1, defined] = [
        np.corrcoef(np.column_stack((x_ranks, ranks)), rowvar=False)[1, 0]
        for ranks in stats.rankdata(ys, axis=1)
    ]
    return out


@dataclass(frozen=True)
class Statistic:
    """One correlation with its bootstrap interval."""

    statistic: str  # e.g. "identification kendall_tau", "false_alarms spearman_rho [binary]"
    form: str  # the suite's form it reads: faulty or fixed
    kind: str  # the cases' task kind, or "all"
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
            "form": self.form,
            "kind": self.kind,
            "diagnosers": self.diagnosers,
            "cases": self.cases,
            "value": fmt(self.value),
            "low": fmt(self.low),
            "high": fmt(self.high),
            "reps": self.reps,
            "undefined": self.undefined,
        }


def _interval(drawn: np.ndarray) -> tuple[float, float, int]:
    """The percentile interval of the draws with a correlation, and how many there were."""
    defined = drawn[~np.isnan(drawn)]
    if not len(defined):
        return math.nan, math.nan, 0
    tail = 100 * (1 - LEVEL) / 2
    low, high = np.percentile(defined, [tail, 100 - tail])
    return float(low), float(high), len(defined)


def bootstrap(
    grid: pd.DataFrame,
    suite: SuiteMatrix,
    *,
    reps: int = REPS,
    seed: int = SEED,
    suffix: str = "",
    kind: str = ALL,
) -> list[Statistic]:
    """Tau and rho for each of :data:`MEASURES` that has cases, with percentile intervals
    over draws of the cases (:func:`scipy.stats.bootstrap`; the draws of one seed are the
    same for every measure, and a draw without a correlation is left out and counted:
    hence scipy's distribution of draws here, where :func:`faultbench.scoring.stats.bootstrap`
    gives only the interval)."""
    n = len(suite.cases)
    out = []
    for measure, form, column, _ in MEASURES:
        cases = suite.cases_of(measure)
        if cases < (1 if kind == ALL else MIN_CASES):
            continue
        x = grid.loc[list(suite.diagnosers), column].to_numpy(dtype=float)
        tau, rho = correlations(x, suite.score(measure))

        def statistic(
            draws: np.ndarray, axis: int = -1, x: np.ndarray = x, measure: str = measure
        ) -> np.ndarray:  # draws: (n,) or (batch, n) case indices; out: (2,) or (2, batch)
            scores = np.array([suite.score(measure, draw) for draw in np.atleast_2d(draws)])
            found = draw_correlations(x, scores)
            return found[:, 0] if np.ndim(draws) == 1 else found

        with warnings.catch_warnings():  # undefined draws are counted below, not warned of
            warnings.simplefilter("ignore", stats.DegenerateDataWarning)
            drawn = stats.bootstrap(
                (np.arange(n),),
                statistic,
                n_resamples=reps,
                vectorized=True,
                method="percentile",
                rng=np.random.default_rng(seed),
            ).bootstrap_distribution
        for k, (name, value) in enumerate((("kendall_tau", tau), ("spearman_rho", rho))):
            low, high, defined = _interval(drawn[k])
            label = f"{measure} {name}{suffix}" + ("" if kind == ALL else f" [{kind}]")
            out.append(
                Statistic(
                    label,
                    form,
                    kind,
                    len(suite.diagnosers),
                    cases,
                    value,
                    low,
                    high,
                    defined,
                    reps - defined,
                )
            )
    return out


def kind_shares(suite: SuiteMatrix) -> pd.DataFrame:
    """Per task kind and diagnoser: each measure's suite share with its Wilson interval."""
    rows = []
    for kind in sorted(set(suite.kinds)):
        part = suite.of_kind(kind)
        for i, name in enumerate(part.diagnosers):
            row: dict[str, object] = {"kind": kind, "diagnoser": name}
            for measure, values, take in (
                ("identification", part.named, part.known),
                ("out_of_list", part.detected, ~part.known),
                ("false_alarms", part.alarmed, np.ones(len(part.cases), dtype=bool)),
            ):
                share = wilson(int(values[i, take].sum()), int(take.sum()))
                row[f"{measure}_hits"], row[f"{measure}_n"] = share.hits, share.n
                row[measure] = share.value
                row[f"{measure}_low"], row[f"{measure}_high"] = share.low, share.high
            rows.append(row)
    return pd.DataFrame(rows)


def disagreements(grid: pd.DataFrame, suite: SuiteMatrix) -> pd.DataFrame:
    """Per case and form: what the grid promises on it (mean over diagnosers), what the
    suite gives (share of diagnosers right), and the gap, largest first."""
    rows = []
    grid = grid.loc[list(suite.diagnosers)]
    for j, (case, label, kind) in enumerate(
        zip(suite.cases, suite.labels, suite.kinds, strict=True)
    ):
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
                    "kind": kind,
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


@dataclass(frozen=True)
class Validity:
    """What :func:`measure` finds, as the tables ``validity.*`` are written from."""

    statistics: pd.DataFrame  # every correlation (per form, per kind) with its interval
    points: pd.DataFrame  # per diagnoser: grid and suite scores, the scatter's points
    gaps: pd.DataFrame  # per case and form: grid's promise against the suite's result
    kinds: pd.DataFrame  # per kind and diagnoser: suite shares with Wilson intervals
    known_labels: Mapping[str, int]  # the known-label cases, counted by label
    case_kinds: Mapping[str, int]  # the cases, counted by task kind


def measure(
    grid: pd.DataFrame,
    answers: pd.DataFrame,
    *,
    reps: int = REPS,
    seed: int = SEED,
) -> Validity:
    """The statistics over all cases and per kind, the per-diagnoser points, the per-case
    gaps and the per-kind shares. Ranks the diagnosers present on both sides (in the grid's
    order)."""
    names = [d for d in grid.index if d in set(answers["diagnoser"])]
    suite = suite_matrix(answers, names)
    real = [d for d in names if not is_baseline(d)]
    found = bootstrap(grid, suite, reps=reps, seed=seed)
    if len(real) < len(names):
        found += bootstrap(
            grid, suite_matrix(answers, real), reps=reps, seed=seed, suffix=" (no baselines)"
        )
    for kind in sorted(set(suite.kinds)):
        found += bootstrap(grid, suite.of_kind(kind), reps=reps, seed=seed, kind=kind)
    order = {form: i for i, form in enumerate(("faulty", "fixed"))}
    found.sort(key=lambda s: (order[s.form], s.kind != ALL, s.kind))
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
    labels = [label for label, known in zip(suite.labels, suite.known, strict=True) if known]
    return Validity(
        pd.DataFrame([s.row() for s in found]),
        points,
        disagreements(grid, suite),
        kind_shares(suite),
        {label: labels.count(label) for label in dict.fromkeys(sorted(labels))},
        {kind: suite.kinds.count(kind) for kind in sorted(set(suite.kinds))},
    )
