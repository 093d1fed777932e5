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

from faultbench.diagnosis import UNKNOWN

if TYPE_CHECKING:  # evaluate imports this module
    from faultbench.evaluate import RunResult

BINS = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)  # confidence bins of the calibration table


def coverage(results: Sequence[RunResult]) -> dict[str, float | None]:
    """Share of runs answered (not ``unknown``), and accuracy on those."""
    answered = [r for r in results if r.status == "ok" and r.predicted != UNKNOWN]
    return {
        "coverage": len(answered) / max(1, len(results)),
        "selective_accuracy": (
            sum(r.correct for r in answered) / len(answered) if answered else None
        ),
        "abstained": float(len(results) - len(answered)),
    }


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
