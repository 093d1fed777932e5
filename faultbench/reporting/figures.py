"""The results figures: confusion heatmaps, and loss and accuracy curves per condition.

Matplotlib runs on the Agg backend (files only, no display), so reports work
on headless machines and in worker processes.

Drawing is most of a warm report's time (about half a second a figure), and a
rerun mostly redraws what it drew before. So each PNG carries, in a text chunk,
a digest of what it shows (the numbers and labels), of this module's code and
of matplotlib's version; a figure whose file already carries the digest of
what it would show now is left as it is. The same inputs draw the same bytes,
so this changes no file, only how often one is drawn.
"""

from __future__ import annotations

import hashlib
import inspect
import sys
from functools import cache
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from PIL import Image

from faultbench.faults.fault import HEALTHY, condition_names
from faultbench.reporting.report import Grid
from faultbench.scoring.diagnosis import UNKNOWN
from faultbench.scoring.evaluate import Report

SMOOTH = 25  # steps in the moving average of the loss: single batches are noisy
DPI = 110


def full_confusion(report: Report) -> pd.DataFrame:
    """The confusion matrix with every condition as a row and every answer as a column.

    Conditions that were not evaluated get a row of zeros, so matrices of
    different reports line up.
    """
    matrix = report.confusion
    rows = condition_names() + sorted(set(matrix.index) - set(condition_names()))
    columns = [*condition_names(), UNKNOWN]
    columns += sorted(set(matrix.columns) - set(columns))
    return matrix.reindex(index=rows, columns=columns, fill_value=0)


def confusion_figure(report: Report, path: Path) -> Path:
    """Write the confusion heatmap of ``report`` to ``path`` (PNG)."""
    matrix = full_confusion(report)
    split = "tuned-on" if report.tuned else "held-out"
    title = (
        f"{report.diagnoser} on {report.task} ({split}): {report.correct}/{report.total} correct"
    )
    digest = _digest(matrix.to_csv(), title)
    if _drawn_already(path, digest):
        return path
    counts = matrix.to_numpy()
    fig, ax = plt.subplots(figsize=(8.5, 7))
    image = ax.imshow(counts, cmap="Blues", vmin=0, vmax=max(1, int(counts.max())))
    ax.set_xticks(range(len(matrix.columns)), matrix.columns, rotation=50, ha="right")
    ax.set_yticks(range(len(matrix.index)), matrix.index)
    ax.set_xlabel("diagnoser's answer")
    ax.set_ylabel("injected condition")
    for (i, j), n in np.ndenumerate(counts):
        if n:  # zeros left blank so the mistakes stand out
            dark = n > counts.max() / 2
            ax.text(j, i, str(n), ha="center", va="center", color="white" if dark else "black")
    ax.set_title(title)
    fig.colorbar(image, ax=ax, fraction=0.04, label="runs")
    return _save(fig, path, digest)


def _mean_curve(curves: list[np.ndarray]) -> np.ndarray:
    # Runs of one condition have equal lengths; a failed run is simply absent.
    length = min(len(c) for c in curves)
    return np.mean([c[:length] for c in curves], axis=0)


def curves_figure(task: str, grid: Grid, path: Path) -> Path:
    """Write the loss and validation accuracy curves of every condition, mean over seeds."""
    curves = []  # (index, condition, smoothed loss, evaluation steps, accuracy)
    for k, cond in enumerate(condition_names()):
        traces = [r.trace for (c, _), r in sorted(grid.items()) if c == cond and r and r.trace]
        if not traces:
            continue
        loss = pd.Series(_mean_curve([t.loss for t in traces]))
        smooth = loss.rolling(SMOOTH, min_periods=1).mean()
        acc = _mean_curve([t.val_acc for t in traces])
        curves.append((k, cond, smooth.where(smooth > 0), traces[0].eval_steps[: len(acc)], acc))
    seeds = len({seed for _, seed in grid})
    shown: list[str | bytes] = [f"{task} {seeds}"]
    for k, cond, loss, at, acc in curves:
        shown += [f"{k} {cond}", np.asarray(loss).tobytes(), at.tobytes(), acc.tobytes()]
    digest = _digest(*shown)
    if _drawn_already(path, digest):
        return path
    fig, (loss_ax, acc_ax) = plt.subplots(1, 2, figsize=(13, 5))
    colors = plt.get_cmap("tab10")
    for k, cond, loss, at, acc in curves:
        style = {
            "color": "black" if cond == HEALTHY else colors(k % 10),
            "label": cond,
            "linewidth": 2.4 if cond == HEALTHY else 1.3,
        }
        loss_ax.plot(np.arange(1, len(loss) + 1), loss, **style)
        acc_ax.plot(at, acc, marker=".", **style)
    loss_ax.set_yscale("log")
    loss_ax.set(
        xlabel="step",
        ylabel=f"training loss ({SMOOTH}-step moving mean)",
        title=f"{task}: training loss, mean of {seeds} seeds",
    )
    acc_ax.set(
        xlabel="step",
        ylabel="validation accuracy",
        ylim=(-0.02, 1.02),
        title=f"{task}: validation accuracy, mean of {seeds} seeds",
    )
    acc_ax.legend(loc="center left", bbox_to_anchor=(1.01, 0.5), fontsize="small")
    return _save(fig, path, digest)


DIGEST_KEY = "faultbench-digest"  # the PNG text chunk naming what the figure shows


@cache
def _drawing_code() -> bytes:
    """What draws a figure: this module's source and matplotlib's version."""
    return inspect.getsource(sys.modules[__name__]).encode() + matplotlib.__version__.encode()


def _digest(*shown: str | bytes) -> str:
    """A digest of what a figure shows and of the code that draws it."""
    digest = hashlib.sha256(_drawing_code())
    for part in shown:
        digest.update(part if isinstance(part, bytes) else part.encode())
        digest.update(b"\0")
    return digest.hexdigest()[:24]


def _drawn_already(path: Path, digest: str) -> bool:
    """Whether ``path`` is a PNG drawn by this code from what ``digest`` names."""
    try:
        with Image.open(path) as image:
            return getattr(image, "text", {}).get(DIGEST_KEY) == digest
    except (OSError, ValueError):  # missing, unreadable, not a PNG: draw it
        return False


def _save(fig: plt.Figure, path: Path, digest: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    # No date in the metadata, so the same tables draw the same bytes.
    fig.savefig(path, dpi=DPI, metadata={"Software": None, DIGEST_KEY: digest})
    plt.close(fig)
    return path
