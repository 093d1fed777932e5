"""Severity levels: mild, moderate and severe, per task, calibrated by effect.

A fault's knob means different things on different tasks: a learning rate
×11 is loud on one and harmless on another. ``faultbench calibrate``
(:mod:`faultbench.tools.calibrate`) measures, on seeds the benchmark never
scores, how far each severity moves the run's own signals against the healthy
runs' spread, and writes the chosen severities to :data:`LEVELS_FILE`, a
versioned file of the repository that the full grid reads. No diagnoser's
answer enters it.
"""

from __future__ import annotations

import csv
import io
import math
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from faultbench.tasks.task import Task

LEVELS = ("mild", "moderate", "severe")  # mildest first
CANONICAL = "canonical"  # the level of a fault at its canonical severity (classic grid)
FIXED = "fixed"  # the level of a variant without a knob: the bug has no degree
# The row of a variant the calibration found on fewer than most of its bases, at its
# strongest (or on none): the task's drawn designs mask it, and the full grid leaves it out.
HIDDEN = "hidden"
LEVELS_FILE = Path(__file__).resolve().with_name("levels.csv")  # resolve: the source, not a link
FIELDS = ("task", "variant", "level", "severity", "effect", "visible_share", "seeds", "code")


@dataclass(frozen=True)
class Level:
    """One calibrated severity of one variant on one task."""

    task: str  # the task it was calibrated on
    variant: str  # ``fault`` or ``fault.variant``
    level: str  # one of LEVELS, FIXED or HIDDEN
    severity: float  # the knob's value (NaN without a knob)
    effect: float  # median over the calibration seeds of the largest |z| of any signal
    visible_share: float  # share of calibration seeds whose run differed from healthy
    seeds: str  # the calibration seeds of the swept bases, space separated
    code: str = ""  # what it was measured on (faultbench.tools.calibrate.measured_on)


def load_levels(path: Path = LEVELS_FILE) -> list[Level]:
    """Every level in ``path`` (none when the file does not exist yet)."""
    try:
        stat = path.stat()
    except FileNotFoundError:
        return []
    return list(_read_levels(path, stat.st_size, stat.st_mtime_ns))


@cache
def _read_levels(path: Path, size: int, mtime_ns: int) -> tuple[Level, ...]:
    """The file's levels, read once per version of it (a grid asks for every variant)."""
    with path.open(newline="") as handle:
        return tuple(
            Level(
                row["task"],
                row["variant"],
                row["level"],
                float(row["severity"]),
                float(row["effect"]),
                float(row["visible_share"]),
                row["seeds"],
                row.get("code") or "",
            )
            for row in csv.DictReader(handle)
        )


def write_levels(levels: list[Level], path: Path = LEVELS_FILE) -> Path:
    """Write ``levels`` sorted by task, variant and level, so the bytes are stable.

    A file that already holds these bytes is left alone: rewriting it would touch
    its folder, and the Makefile reinstalls the package when a package folder
    changes (a new module needs its link), so every ``make`` after a warm
    ``faultbench calibrate`` would reinstall for nothing.
    """
    order = {name: i for i, name in enumerate(LEVELS)}
    rows = sorted(levels, key=lambda lv: (lv.task, lv.variant, order.get(lv.level, 9)))
    text = io.StringIO()
    writer = csv.writer(text, lineterminator="\n")
    writer.writerow(FIELDS)
    for lv in rows:
        writer.writerow(
            [
                lv.task,
                lv.variant,
                lv.level,
                f"{lv.severity:.6g}",
                f"{lv.effect:.4g}",
                f"{lv.visible_share:.3f}",
                lv.seeds,
                lv.code,
            ]
        )
    if path.is_file() and path.read_text() == text.getvalue():
        return path
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text.getvalue())
    tmp.replace(path)  # never a half-written levels file
    return path


def levels_for(task: str, variant: str, path: Path = LEVELS_FILE) -> dict[str, float]:
    """Level name -> severity of ``variant`` on ``task``, mildest first ({} if uncalibrated)."""
    found = {
        lv.level: lv.severity
        for lv in load_levels(path)
        if (lv.task, lv.variant) == (task, variant)
    }
    return {name: found[name] for name in LEVELS if name in found}


def calibrated(task: Task, path: Path = LEVELS_FILE) -> bool:
    """Whether ``path`` holds levels measured on ``task``."""
    return any(lv.task == task.name for lv in load_levels(path))


def hidden_on(task: str, path: Path = LEVELS_FILE) -> dict[str, str]:
    """Variant -> why the full grid leaves it out of ``task``: the calibration found it on
    fewer than most of the drawn bases it was swept on, even at its strongest."""
    out = {}
    for lv in load_levels(path):
        if lv.task != task or lv.level != HIDDEN:
            continue
        swept = len(lv.seeds.split())
        strongest = "" if math.isnan(lv.severity) else f" at severity {lv.severity:g}"
        out[lv.variant] = (
            f"visible on {round(lv.visible_share * swept)} of {swept} calibration bases{strongest}"
            if swept
            else "applies to none of the calibration draws"
        )
    return out
