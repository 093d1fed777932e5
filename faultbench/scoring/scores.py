"""Scores that separate what a diagnoser can do: identify, detect, stay quiet, at what cost.

Everything here reads one table of scored runs (:data:`COLUMNS`, one row per
diagnosis), so the leaderboard, ``--json`` and the paper compute each number
the same way. Every share comes with its 95% Wilson interval, and the statistics
themselves (Wilson, McNemar, bootstrap) are :mod:`faultbench.scoring.stats`'.

- *identification*: runs with a known fault (one of the nine); right when the
  answer names it. Accuracy, and macro-recall (the mean of per-fault recalls,
  so a rare fault weighs as much as a common one).
- *detection*: runs with a held-out fault (a bug outside the nine, whose name no
  diagnoser is told): the share not called healthy, and the share called
  ``other_fault``.
- *known-fault detection*: runs with a known fault not called healthy (whatever
  label), and *alarm precision*: of the answers that are not "healthy", the
  share on a run that has a fault. What a detection-only tool claims, scored
  so that alarming on everything cannot look good.
- *false alarms*: healthy runs called anything else.
- *undecided*: the share of runs answered ``undecided`` ("not yet": a run cut early, one
  evaluation), scored apart from right and wrong: it is never correct (identification
  counts it as a miss: abstaining is never free) and never an alarm (nor a detection),
  and its share is reported beside every score.
- *cost*: probe steps and seconds per diagnosis (seconds are a wall-clock
  measurement, kept out of every score).
- *McNemar*: an exact test between two diagnosers on the same runs.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from faultbench.scoring.stats import CONFIDENCE, Share, mcnemar_p, wilson

if TYPE_CHECKING:
    import pandas as pd

HEALTHY, KNOWN, HELDOUT = "healthy", "known", "heldout"  # the kinds of truth a run has
OTHER_FAULT = "other_fault"  # "something is broken, and it is none of the nine"
UNDECIDED = "undecided"  # faultbench.scoring.contract.UNDECIDED: "not yet", no alarm

#: The table every score reads: one row per diagnosis.
COLUMNS = {
    "diagnoser": "the diagnoser's name",
    "task": "the task's name",
    "tuned": "True when the task is in the diagnoser's tuned_on",
    "seed": "the run's seed",
    "truth": "the label a perfect diagnoser answers (held-out faults: their own name)",
    "kind": "healthy, known (one of the nine) or heldout (a bug outside the nine)",
    "variant": "the fault's mechanism ('' for healthy and classic runs)",
    "level": "mild, moderate, severe, or canonical (classic grid); '' for healthy",
    "grid": "classic or full",
    "predicted": "the diagnoser's label (unknown on error or timeout)",
    "status": "ok, or why the answer failed (error, timeout, crashed, run-failed)",
    "probe_steps": "probe training steps the diagnosis used",
    "drawn": "True when the run trained on a base drawn from the task's family",
    "every": "the sampling the trace was read at (the Monitor's every)",
    "diagnose_seconds": "wall time of the diagnosis (a measurement, not a score)",
}
RUN_KEY = ("task", "truth", "variant", "level", "grid", "seed", "every")  # one run's diagnosis


def _share(mask: Any) -> Share:
    values = np.asarray(mask, dtype=bool)
    return wilson(int(values.sum()), int(values.size))


def _right(frame: pd.DataFrame) -> Any:
    return (frame["status"] == "ok") & (frame["predicted"] == frame["truth"])


def identification(frame: pd.DataFrame) -> dict[str, Any]:
    """Accuracy and macro-recall on the known-fault runs of ``frame``."""
    known = frame[frame["kind"].to_numpy() == KNOWN]
    right = _right(known).to_numpy(dtype=bool)  # plain arrays from here: a leaderboard
    truth = known["truth"].to_numpy()  # asks this of a thousand small frames
    recalls = _grouped(truth, right)
    macro = float(np.mean([r.value for r in recalls.values()])) if recalls else float("nan")
    return {
        "accuracy": _share(right),
        "macro_recall": macro,
        "recall": recalls,
        "by_level": _grouped(known["level"].to_numpy(), right),
        "by_variant": _grouped(known["variant"].to_numpy(), right),
    }


def _grouped(values: np.ndarray, right: np.ndarray) -> dict[str, Share]:
    """The share of ``right`` runs per distinct value (sorted; the empty value left out)."""
    return {str(v): _share(right[values == v]) for v in sorted(set(values)) if v != ""}


def raises_alarm(predicted: str) -> bool:
    """Whether an answer is an alarm: anything but healthy or undecided."""
    return predicted not in (HEALTHY, UNDECIDED)


def _alarmed(frame: pd.DataFrame) -> Any:
    """Answers that raise an alarm: answered, and neither healthy nor undecided."""
    return (frame["status"] == "ok") & ~frame["predicted"].isin((HEALTHY, UNDECIDED))


def detection(frame: pd.DataFrame) -> dict[str, Share]:
    """On held-out-fault runs: the share not called healthy (nor undecided), and the share
    called other_fault."""
    held = frame[(frame["kind"] == HELDOUT) & (frame["status"] == "ok")]
    failed = frame[(frame["kind"] == HELDOUT) & (frame["status"] != "ok")]
    n = len(held) + len(failed)  # a failed answer detects nothing
    return {
        "not_healthy": wilson(int(_alarmed(held).sum()), n),
        "other_fault": wilson(int((held["predicted"] == OTHER_FAULT).sum()), n),
    }


def known_detection(frame: pd.DataFrame) -> Share:
    """On runs with a known fault: the share not called healthy (an alarm, right or wrong
    label), what a detection-only tool claims to do."""
    known = frame[frame["kind"] == KNOWN]
    return _share(_alarmed(known))


def alarm_precision(frame: pd.DataFrame) -> Share:
    """Of the answers that raise an alarm (anything but healthy or undecided), the share on a
    run that has a fault: over the grid's own mix of runs, so alarming on everything cannot
    look good."""
    alarms = frame[_alarmed(frame)]
    return _share(alarms["kind"] != HEALTHY)


def false_alarms(frame: pd.DataFrame) -> Share:
    """Healthy runs called anything else but undecided (a failed answer on a healthy run is
    no alarm either)."""
    return _share(_alarmed(frame[frame["kind"] == HEALTHY]))


def undecided(frame: pd.DataFrame) -> Share:
    """The share of runs answered undecided (of every run: none is correct)."""
    return _share((frame["status"] == "ok") & (frame["predicted"] == UNDECIDED))


def cost(frame: pd.DataFrame) -> dict[str, float]:
    """Mean probe steps and mean seconds per diagnosis (seconds: a measurement)."""
    if frame.empty:
        return {"probe_steps": float("nan"), "seconds": float("nan")}
    return {
        "probe_steps": float(frame["probe_steps"].mean()),
        "seconds": float(frame["diagnose_seconds"].mean()),
    }


def summary(frame: pd.DataFrame) -> dict[str, Any]:
    """Every score of one diagnoser's runs, overall and split by what matters."""
    splits: dict[str, Any] = {}
    for name, part in (
        ("tuned_on_task", frame[frame["tuned"]]),
        ("held_out_task", frame[~frame["tuned"]]),
        ("classic_grid", frame[frame["grid"] == "classic"]),
        ("full_grid", frame[frame["grid"] == "full"]),
    ):
        splits[name] = {
            "identification": identification(part)["accuracy"],
            "detection": detection(part)["not_healthy"],
            "false_alarms": false_alarms(part),
            "undecided": undecided(part),
        }
    return {
        "runs": len(frame),
        "identification": identification(frame),
        "detection": detection(frame),
        "known_detection": known_detection(frame),
        "alarm_precision": alarm_precision(frame),
        "false_alarms": false_alarms(frame),
        "undecided": undecided(frame),
        "splits": splits,
        "cost": cost(frame),
    }


@dataclass(frozen=True)
class McNemar:
    """An exact McNemar test of two diagnosers on the same runs."""

    first: str  # one diagnoser
    second: str  # the other
    runs: int  # runs both answered (matched by RUN_KEY)
    only_first: int  # runs only the first got right
    only_second: int  # runs only the second got right
    p_value: float  # two-sided exact binomial test on the discordant runs (1.0 if none)


def mcnemar(frame: pd.DataFrame, first: str, second: str) -> McNemar:
    """Compare ``first`` and ``second`` on the runs both were scored on."""
    right = frame.assign(right=_right(frame))
    key = list(RUN_KEY)
    a = right[right["diagnoser"] == first].set_index(key)["right"]
    b = right[right["diagnoser"] == second].set_index(key)["right"]
    both = a.to_frame("a").join(b.to_frame("b"), how="inner")
    only_a = int((both["a"] & ~both["b"]).sum())
    only_b = int((~both["a"] & both["b"]).sum())
    return McNemar(first, second, len(both), only_a, only_b, mcnemar_p(only_a, only_b))


def mcnemar_table(frame: pd.DataFrame, diagnosers: Iterable[str]) -> list[McNemar]:
    """Every pair of ``diagnosers``, in the order given."""
    names = list(diagnosers)
    return [mcnemar(frame, a, b) for i, a in enumerate(names) for b in names[i + 1 :]]


def to_jsonable(value: Any) -> Any:
    """Shares and nested mappings of them as plain JSON values."""
    if isinstance(value, Share):
        return value.to_dict()
    if isinstance(value, Mapping):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, float) and not np.isfinite(value):
        return None
    return value


__all__ = [
    "COLUMNS",
    "CONFIDENCE",
    "HEALTHY",
    "HELDOUT",
    "KNOWN",
    "OTHER_FAULT",
    "RUN_KEY",
    "UNDECIDED",
    "McNemar",
    "Share",
    "alarm_precision",
    "cost",
    "detection",
    "false_alarms",
    "identification",
    "known_detection",
    "mcnemar",
    "mcnemar_table",
    "raises_alarm",
    "summary",
    "to_jsonable",
    "undecided",
    "wilson",
]
