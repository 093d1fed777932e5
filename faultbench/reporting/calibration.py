"""Abstention and confidence: coverage against accuracy, and a calibration table.

A diagnoser abstains by answering ``unknown``. Where it gives confidences,
ranking its answers by confidence traces how accuracy grows as it is allowed
to abstain on more runs, and binning them shows whether "0.8" means 80%.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from faultbench.scoring.diagnosis import UNKNOWN
from faultbench.scoring.evaluate import coverage

if TYPE_CHECKING:
    from faultbench.scoring.evaluate import Report, RunResult

BINS = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)  # confidence bins of the calibration table


def coverage_curve(results: Sequence[RunResult]) -> pd.DataFrame:
    """Accuracy when keeping only the most confident answers, for each coverage."""
    scored = [r for r in results if r.confidence is not None and r.predicted != UNKNOWN]
    if not scored:
        return pd.DataFrame(columns=["coverage", "accuracy", "min_confidence"])
    scored.sort(key=lambda r: -float(r.confidence or 0.0))
    correct = np.cumsum([r.correct for r in scored])
    kept = np.arange(1, len(scored) + 1)
    return pd.DataFrame(
        {
            "coverage": kept / len(results),
            "accuracy": correct / kept,
            "min_confidence": [float(r.confidence or 0.0) for r in scored],
        }
    )


def calibration_table(results: Sequence[RunResult]) -> pd.DataFrame:
    """Per confidence bin: answers, mean confidence, accuracy (empty bins kept)."""
    rows = []
    scored = [r for r in results if r.confidence is not None and r.predicted != UNKNOWN]
    for low, high in itertools.pairwise(BINS):
        inside = [
            r
            for r in scored
            if low < float(r.confidence or 0.0) <= high
            or (low == 0.0 and float(r.confidence or 0.0) == 0.0)
        ]
        rows.append(
            {
                "bin": f"({low:.1f}, {high:.1f}]",
                "answers": len(inside),
                "mean_confidence": float(np.mean([r.confidence for r in inside]))
                if inside
                else np.nan,
                "accuracy": float(np.mean([r.correct for r in inside])) if inside else np.nan,
            }
        )
    return pd.DataFrame(rows)


def _fmt(value: float | None) -> str:
    return "" if value is None or value != value else f"{value:.3f}"


def coverage_frame(reports: Sequence[Report]) -> pd.DataFrame:
    """Per diagnoser x task: how often it answered, and its accuracy when it did."""
    rows = []
    for report in reports:
        cov = coverage(report.results)
        rows.append(
            {
                "diagnoser": report.diagnoser,
                "task": report.task,
                "coverage": _fmt(cov["coverage"]),
                "abstained": str(int(cov["abstained"] or 0)),
                "selective_accuracy": _fmt(cov["selective_accuracy"]),
                "gives_confidence": str(any(r.confidence is not None for r in report.results)),
            }
        )
    frame = pd.DataFrame(rows)
    return frame.sort_values(["diagnoser", "task"], kind="stable").reset_index(drop=True)


def calibration_frame(reports: Sequence[Report]) -> pd.DataFrame:
    """The calibration table of every diagnoser x task that gives confidences."""
    parts = []
    for report in sorted(reports, key=lambda r: (r.diagnoser, r.task)):
        if not any(r.confidence is not None for r in report.results):
            continue
        table = calibration_table(report.results)
        table.insert(0, "task", report.task)
        table.insert(0, "diagnoser", report.diagnoser)
        parts.append(table)
    columns = ["diagnoser", "task", "bin", "answers", "mean_confidence", "accuracy"]
    if not parts:
        return pd.DataFrame(columns=columns)
    frame = pd.concat(parts, ignore_index=True)
    frame["mean_confidence"] = [_fmt(v) for v in frame["mean_confidence"]]
    frame["accuracy"] = [_fmt(v) for v in frame["accuracy"]]
    frame["answers"] = frame["answers"].astype(str)
    return frame[columns]


def calibration_markdown(coverage_table: pd.DataFrame, calibration: pd.DataFrame) -> str:
    """``results/calibration.md``: abstention, then calibration where confidences exist."""
    from faultbench.reporting.report import markdown_table

    return (
        "# Abstention and calibration\n\n"
        "*coverage*: share of runs the diagnoser answered (not `unknown`); *selective "
        "accuracy*: accuracy on those. The calibration table bins the answers of diagnosers "
        "that give a confidence: a calibrated one is right about as often as it says.\n\n"
        f"{markdown_table(coverage_table)}\n\n## Calibration\n\n"
        f"{markdown_table(calibration) if len(calibration) else 'No diagnoser gave confidences.'}\n"
    )
