"""Builds the paper: Markdown with placeholders, filled from ``results/``, rendered to HTML.

The source never holds a number. Each ``{{...}}`` placeholder is resolved from
the CSV files ``faultbench report`` wrote, at build time:

- ``{{faults:TASK:CONDITION:COLUMN}}``, ``{{waits:TASK:CONDITION:COLUMN}}``,
  ``{{scores:DIAGNOSER:TASK:COLUMN}}``,
  ``{{mcnemar:TASK:A:B:COLUMN}}``, ``{{setup:TASK:COLUMN}}``,
  ``{{conditions:CONDITION:COLUMN}}``, ``{{leaderboard:DIAGNOSER:COLUMN}}``,
  ``{{leaderboard_tasks:DIAGNOSER:TASK}}``, ``{{realbugs:DIAGNOSER:COLUMN}}``,
  ``{{validity:STATISTIC:COLUMN}}``: one cell, exactly as the CSV has it;
- ``{{count:TABLE:COLUMN}}``: how many distinct values a column holds;
- ``{{table:NAME}}`` or ``{{table:faults:TASK}}``: a whole table;
- ``{{figure:PATH}}``: a figure under ``results/``, copied next to the HTML.

An unknown placeholder fails the build, so the paper cannot cite a number
that ``results/`` does not hold.
"""

from __future__ import annotations

import html
import re
import shutil
from pathlib import Path

import markdown
import pandas as pd

from faultbench.core.errors import FaultbenchError, unknown_name
from faultbench.reporting.report import faults_view, markdown_table, recall_view, scores_view

#: Table name -> the columns that identify one of its rows.
KEYS: dict[str, tuple[str, ...]] = {
    "faults": ("task", "condition"),
    "waits": ("task", "condition"),  # wall-clock: the data-wait share (results/waits.csv)
    "scores": ("diagnoser", "task"),
    "mcnemar": ("task", "diagnoser_a", "diagnoser_b"),
    "setup": ("task",),
    "conditions": ("condition",),
    "leaderboard": ("diagnoser",),  # the full grid's scores (results/leaderboard.csv)
    "leaderboard_tasks": ("diagnoser",),  # identification per task
    "realbugs": ("diagnoser",),  # the real-bug suite's shares, as numbers
    "validity": ("statistic",),  # grid against real bugs: tau and rho with intervals
}
TABLES = (
    "faults",
    "scores",
    "recall",
    "mcnemar",
    "conditions",
    "setup",
    "leaderboard",
    "leaderboard_tasks",
    "validity",
    "validity_diagnosers",
)
PLACEHOLDER = re.compile(r"\{\{([^{}]+)\}\}")
STYLE = """body{font-family:Georgia,serif;max-width:60em;margin:2em auto;padding:0 1em;
line-height:1.5;color:#222}table{border-collapse:collapse;margin:1em 0;font-size:.85em}
th,td{border:1px solid #bbb;padding:.2em .5em;text-align:right}th{background:#eee}
td:first-child,th:first-child{text-align:left}img{max-width:100%}code{font-size:.9em}"""


class Results:
    """The CSV tables of a results directory, read as text (never re-formatted)."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self._tables: dict[str, pd.DataFrame] = {}

    def table(self, name: str) -> pd.DataFrame:
        """``<root>/<name>.csv`` with every cell as the text written."""
        if name not in self._tables:
            path = self.root / f"{name}.csv"
            if not path.exists():
                raise FaultbenchError(f"{path} not found; run `faultbench report` first")
            self._tables[name] = pd.read_csv(path, dtype=str, keep_default_na=False)
        return self._tables[name]

    def cell(self, name: str, key: tuple[str, ...], column: str) -> str:
        """The cell of the row ``key`` (values of :data:`KEYS` ``[name]``) and ``column``."""
        frame = self.table(name)
        if column not in frame.columns:
            raise unknown_name(f"column of {name}.csv", column, frame.columns)
        match = frame
        for col, value in zip(KEYS[name], key, strict=True):
            match = match[match[col] == value]
        if match.empty:
            rows = [":".join(r) for r in frame[list(KEYS[name])].itertuples(index=False)]
            raise unknown_name(f"row of {name}.csv", ":".join(key), rows)
        return str(match.iloc[0][column])


def resolve(placeholder: str, results: Results) -> str:
    """The text that replaces ``{{placeholder}}`` (Markdown or inline HTML).

    Raises:
        FaultbenchError: an unknown table, row or column, or a malformed placeholder.
    """
    kind, *parts = placeholder.strip().split(":")
    if kind == "table":
        return _table(parts, results)
    if kind == "figure":
        path = results.root / ":".join(parts)
        if not path.is_file():
            raise FaultbenchError(f"figure '{path}' not found; run `faultbench report` first")
        return f"figures/{'-'.join(Path(*parts).parts)}"
    if kind == "count" and len(parts) == 2:
        frame = results.table(parts[0])
        if parts[1] not in frame.columns:
            raise unknown_name(f"column of {parts[0]}.csv", parts[1], frame.columns)
        value = str(frame[parts[1]].nunique())
    elif kind in KEYS and len(parts) == len(KEYS[kind]) + 1:
        value = results.cell(kind, tuple(parts[:-1]), parts[-1])
    elif kind in KEYS or kind == "count":
        form = ":".join([kind, *(KEYS.get(kind) or ("TABLE",)), "COLUMN"]).upper()
        form = kind + form[len(kind) :]  # the kind as typed, the parts to fill in capitals
        raise FaultbenchError(f"placeholder '{{{{{placeholder}}}}}' is malformed; expected {form}")
    else:
        raise unknown_name("placeholder kind", kind, [*KEYS, "count", "table", "figure"])
    # Tagged so a reader (and the test) can trace every number to its cell.
    return f'<span class="num" data-key="{html.escape(placeholder)}">{html.escape(value)}</span>'


def _table(parts: list[str], results: Results) -> str:
    name = parts[0] if parts else ""
    if name not in TABLES:
        raise unknown_name("table", name, TABLES)
    if name == "faults" and len(parts) == 2:
        frame = results.table("faults")
        if parts[1] not in set(frame["task"]):
            raise unknown_name("task in faults.csv", parts[1], set(frame["task"]))
        return markdown_table(faults_view(frame, parts[1]))
    if name == "scores":
        return markdown_table(scores_view(results.table("scores")))
    if name == "recall":
        return markdown_table(recall_view(results.table("scores")))
    return markdown_table(results.table(name))


def fill(source: str, results: Results, where: str = "paper") -> str:
    """``source`` with every placeholder resolved; errors name the line."""
    out = []
    for number, line in enumerate(source.splitlines(keepends=True), start=1):
        try:
            out.append(PLACEHOLDER.sub(lambda m: resolve(m.group(1), results), line))
        except FaultbenchError as exc:
            raise FaultbenchError(f"{where}:{number}: {exc}") from None
    return "".join(out)


def build(source: Path, results_dir: Path, out: Path) -> Path:
    """Fill ``source`` from ``results_dir`` and write the HTML (and its figures) to ``out``.

    Returns:
        ``out``.
    """
    if not source.is_file():
        raise FaultbenchError(f"paper source '{source}' not found; expected a Markdown file")
    results = Results(results_dir)
    text = fill(source.read_text(), results, where=str(source))
    body = markdown.markdown(text, extensions=["tables", "toc"])
    title = next((line[2:].strip() for line in text.splitlines() if line.startswith("# ")), "")
    out.parent.mkdir(parents=True, exist_ok=True)
    for key in PLACEHOLDER.findall(source.read_text()):
        if key.startswith("figure:"):
            target = out.parent / resolve(key, results)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(results_dir / key.removeprefix("figure:"), target)
    page = (
        f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{html.escape(title)}</title><style>{STYLE}</style></head>\n"
        f"<body>\n{body}\n</body></html>\n"
    )
    out.write_text(page)
    return out
