"""``results/bench.csv`` and ``bench.md``: the figures ``faultbench bench`` measured, kept.

Wall-clock files (``faultbench.reporting.provenance.WALL_CLOCK``): they move with the
machine and its load, so each says where, when and from which commit it was measured;
``docs/performance.md`` says what each figure measures and links here.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

import pandas as pd

from faultbench.reporting.provenance import git_revision
from faultbench.tools.bench import Figure

COLUMNS = ["figure", "value", "unit", "goal", "met", "detail"]


def frame(figures: Sequence[Figure]) -> pd.DataFrame:
    """One row per figure: the value as measured (empty when it could not be), its goal."""
    rows = [
        {
            "figure": f.name,
            "value": "" if f.value is None else f"{f.value:.3f}",
            "unit": f.unit,
            "goal": f.goal,
            "met": "" if f.met is None else ("yes" if f.met else "no"),
            "detail": f.detail,
        }
        for f in figures
    ]
    return pd.DataFrame(rows, columns=COLUMNS)


def write(figures: Sequence[Figure], folder: Path, *, header: str, command: str) -> list[Path]:
    """Write ``bench.csv`` and ``bench.md`` under ``folder``; return their paths.

    Args:
        figures: What was measured.
        folder: The results folder.
        header: The bench's first line (the machine).
        command: The command line that measured them.
    """
    table = frame(figures)
    folder.mkdir(parents=True, exist_ok=True)
    csv, md = folder / "bench.csv", folder / "bench.md"
    table.to_csv(csv, index=False, lineterminator="\n")
    when = datetime.now(UTC).isoformat(timespec="seconds")
    md.write_text(
        "\n".join(
            [
                "# The benchmark's own speed",
                "",
                f"Measured by `{command}` ({header.removeprefix('faultbench bench')}) at "
                f"{when}, commit {git_revision()}: wall-clock figures, which move with the "
                "machine and its load. What each measures and why its goal: "
                "[docs/performance.md](../docs/performance.md).",
                "",
                table.to_markdown(index=False, disable_numparse=True),
                "",
            ]
        )
    )
    return [csv, md]
