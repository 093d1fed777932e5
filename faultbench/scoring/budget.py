"""The doctor's false-alarm budget: every check's threshold, measured on healthy runs.

Each of the doctor's checks (rules' passive rules and the soundness checks its headline
uses) reads one number off a run, its :class:`Statistic`, oriented so that larger is more
unusual, and has a *bound*: the value its principle names (a first loss twice the kind's
reference, a layer with half its weights never given a gradient). A bound set on digits
and read as a certainty everywhere else alarms on healthy runs of other designs, so a
check also has a *threshold* measured on the healthy drawn runs of the tuned-on tasks
(``faultbench calibrate --what alarms``, :mod:`faultbench.tools.alarms`): the value at
most its share of :data:`BUDGET` of those runs exceed. A check fires when its statistic
reaches the bound **and** exceeds the threshold, and its evidence says how unusual the
value is against those runs: the share of them that reach it (the tail share).

A statistic whose scale depends on what the task predicts (a loss against the kind's
reference, a score against its chance level) is calibrated on each kind apart; on a kind
that no tuned-on task has, the check stays silent and says so. The thresholds are
versioned data, :data:`BUDGET_FILE`, with the code they were measured on: a test fails
while they were measured on other code.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from faultbench.scoring.run import Run

BUDGET = 0.05  # the headline's false alarms allowed on the healthy runs, split across checks
ANY_KIND = "*"  # the kind of a row calibrated on every kind's healthy runs together
BUDGET_FILE = Path(__file__).resolve().with_name("budget.csv")  # resolve: the source
FIELDS = ("check", "kind", "runs", "allowed", "threshold", "healthy", "code")
DIGITS = 6  # significant digits a healthy value is stored with


@dataclass(frozen=True)
class Statistic:
    """One check's number on a run (larger is more unusual) and its principled bound."""

    name: str  # the check's name: its rows in the budget file are keyed by it
    read: Callable[[Run], float]  # the value on a run; NaN where the run does not have it
    bound: float  # the principle: a value below it never fires, whatever healthy runs did
    per_kind: bool  # calibrated on each kind apart (its scale depends on the kind)
    says: str  # what the number is, for the evidence ("first loss / the kind's reference")
    strict: bool = False  # fires only above the bound, not at it

    def reaches(self, value: float) -> bool:
        """Whether ``value`` reaches the bound (NaN never does)."""
        return value > self.bound if self.strict else value >= self.bound


@dataclass(frozen=True)
class Calibration:
    """A statistic's distribution on the healthy runs of the tuned-on tasks, and its threshold."""

    check: str  # the statistic's name
    kind: str  # the kind of task it was measured on, or ANY_KIND
    healthy: tuple[float, ...]  # the values on the healthy runs, sorted (NaN-free)
    allowed: int  # healthy values the threshold lets exceed it (the check's budget share)
    code: str = ""  # what it was measured on (faultbench.tools.alarms.measured_on)

    @property
    def threshold(self) -> float:
        """The value at most :attr:`allowed` healthy values exceed (-inf with none)."""
        if not self.healthy or self.allowed >= len(self.healthy):
            return -math.inf
        return self.healthy[len(self.healthy) - 1 - self.allowed]

    def tail(self, value: float) -> float:
        """The share of the healthy values at or above ``value`` (NaN for a NaN value)."""
        if math.isnan(value) or not self.healthy:
            return math.nan
        return sum(h >= value for h in self.healthy) / len(self.healthy)


def calibrate(check: str, kind: str, values: Iterable[float], share: float) -> Calibration:
    """The calibration of ``check`` on ``kind`` from healthy ``values`` (NaNs left out) at
    ``share`` of the runs: ``floor(share * n)`` of them may exceed the threshold."""
    kept = sorted(float(f"{v:.{DIGITS}g}") for v in values if not math.isnan(v))
    return Calibration(check, kind, tuple(kept), math.floor(share * len(kept) + 1e-9))


@dataclass(frozen=True)
class Reading:
    """One check's verdict on one run: its value, against the bound and the healthy runs."""

    check: str  # the statistic's name
    value: float  # the statistic on the run (NaN: the run does not have it)
    bound: float  # the principle's bound
    threshold: float  # the calibrated threshold (NaN: not calibrated for the run's kind)
    tail: float  # share of the healthy runs at or above the value (NaN: no value or data)
    runs: int  # healthy values the threshold and the tail share were measured on
    fired: bool  # the value reaches the bound and exceeds the threshold
    note: str = ""  # why the check is silent, where it cannot judge

    def evidence(self) -> dict[str, Any]:
        """A JSON-ready mapping (NaN as None), for a diagnosis's evidence."""
        out: dict[str, Any] = {
            "value": _finite(self.value),
            "bound": _finite(self.bound),
            "threshold": _finite(self.threshold),
            "healthy_tail": _finite(self.tail),
            "healthy_runs": self.runs,
        }
        return {**out, "note": self.note} if self.note else out

    def describe(self) -> str:
        """How unusual the value is, in words."""
        if self.note:
            return self.note
        if math.isnan(self.tail):
            return f"{self.value:.4g} (bound {self.bound:g})"
        reach = round(self.tail * self.runs)
        return (
            f"{self.value:.4g}: {reach} of {self.runs} healthy runs of the tuned-on tasks "
            f"reach it (threshold {self.threshold:.4g}, bound {self.bound:g})"
        )


def kind_of(run: Run) -> str:
    """The kind a run is calibrated as: its declared kind; for a user's Monitor given no
    kind, next_token where it recorded per-token targets (a sequence model's), multiclass
    where its output scores classes; else "" (none)."""
    config = run.config
    if config.kind:
        return config.kind
    if np.isfinite(run.trace.counted_share).any():
        return "next_token"
    return "multiclass" if config.n_classes >= 2 else ""


def judge(
    stat: Statistic, run: Run, *, value: float | None = None, path: Path = BUDGET_FILE
) -> Reading:
    """``stat`` on ``run`` (or its ``value`` there, already read), against its bound and its
    calibration for the run's kind."""
    value = float(stat.read(run) if value is None else value)
    kind = kind_of(run) if stat.per_kind else ANY_KIND
    found = calibration(stat.name, kind, path)
    if found is None:
        why = (
            f"not calibrated for kind '{kind or 'unknown'}': no tuned-on task of that kind "
            "has this statistic, so the check stays silent"
            if stat.per_kind
            else "not calibrated: no healthy runs measured (faultbench calibrate --what alarms)"
        )
        return Reading(stat.name, value, stat.bound, math.nan, math.nan, 0, False, why)
    threshold = found.threshold
    fired = stat.reaches(value) and value > threshold
    return Reading(
        stat.name,
        value,
        stat.bound,
        threshold,
        found.tail(value),
        len(found.healthy),
        fired,
    )


def calibration(check: str, kind: str, path: Path = BUDGET_FILE) -> Calibration | None:
    """The calibration of ``check`` on ``kind`` in ``path``, None when there is none."""
    return _by_key(path).get((check, kind))


def load_budget(path: Path = BUDGET_FILE) -> list[Calibration]:
    """Every calibration in ``path`` (none when the file does not exist yet)."""
    return list(_by_key(path).values())


def _by_key(path: Path) -> dict[tuple[str, str], Calibration]:
    try:
        stat = path.stat()
    except FileNotFoundError:
        return {}
    return _read(path, stat.st_size, stat.st_mtime_ns)


@cache
def _read(path: Path, size: int, mtime_ns: int) -> dict[tuple[str, str], Calibration]:
    """The file's calibrations, read once per version of it."""
    with path.open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    return {
        (row["check"], row["kind"]): Calibration(
            row["check"],
            row["kind"],
            tuple(float(v) for v in row["healthy"].split()),
            int(row["allowed"]),
            row["code"],
        )
        for row in rows
    }


def write_budget(found: Iterable[Calibration], path: Path = BUDGET_FILE) -> Path:
    """Write ``found`` sorted by check and kind, so the bytes are stable (a file that holds
    them already is left alone, as :func:`faultbench.faults.levels.write_levels` does)."""
    text = io.StringIO()
    writer = csv.writer(text, lineterminator="\n")
    writer.writerow(FIELDS)
    for c in sorted(found, key=lambda c: (c.check, c.kind)):
        threshold = f"{c.threshold:.{DIGITS}g}"
        healthy = " ".join(f"{v:.{DIGITS}g}" for v in c.healthy)
        writer.writerow([c.check, c.kind, len(c.healthy), c.allowed, threshold, healthy, c.code])
    if path.is_file() and path.read_text() == text.getvalue():
        return path
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text.getvalue())
    tmp.replace(path)  # never a half-written file
    return path


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None
