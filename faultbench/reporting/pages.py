"""Pages whose numbers come from ``results/``: Jinja2 templates filled from its CSV files.

The paper (``paper/paper.md.j2``, :mod:`faultbench.reporting.paper`) is one template.
The README and the pages of ``docs/`` are written by hand, and every part of them that
states measured numbers is a generated block between two markers
(``<!-- results:NAME:start ... -->`` and ``<!-- results:NAME:end -->``), rendered from
``docs/templates/NAME.md.j2`` by ``faultbench leaderboard`` and ``faultbench report``
(:func:`write_docs`), as the README's headline is written between its own markers.
A template never types a measured number; it names the cell that holds it:

- ``{{ faults("digits", "huge_inputs", "first_loss_mean") }}``: one cell, exactly as the
  CSV has it, of a table of :data:`KEYS` (the row's key columns, then the column);
- ``{{ count("realbugs_cases", "case") }}``: how many distinct values a column holds
  (``count("realbugs_cases", "case", label="other_fault")``: on the rows that hold these);
- ``{{ table("scores") }}`` or ``{{ table("faults", "digits") }}``: a whole table;
- ``{{ figure("curves/digits.png") }}``: a figure under ``results/``, as a link;
- ``{{ defaults.healthy_seeds }}``: a default of the code (not a measurement).

An undefined name is an error (Jinja2's ``StrictUndefined``), and so is an unknown
table, row or column: the message names the template's line, and nothing is written.
"""

from __future__ import annotations

import re
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from faultbench.core.errors import FaultbenchError, unknown_name
from faultbench.reporting.report import faults_view, markdown_table, recall_view, scores_view

#: Table name -> the columns that identify one of its rows.
KEYS: dict[str, tuple[str, ...]] = {
    "faults": ("task", "condition"),
    "waits": ("task", "condition"),  # wall-clock: the data-wait share (results/waits.csv)
    "timings": ("diagnoser", "task"),  # wall-clock: seconds per diagnosis and per run
    "scores": ("diagnoser", "task"),
    "mcnemar": ("task", "diagnoser_a", "diagnoser_b"),
    "setup": ("task",),
    "conditions": ("condition",),
    "leaderboard": ("diagnoser",),  # the full grid's scores (results/leaderboard.csv)
    "leaderboard_tasks": ("diagnoser",),  # identification per task
    "leaderboard_variants": ("diagnoser", "task", "variant"),  # recall per variant
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
TEMPLATES = Path("docs") / "templates"  # the templates of a project's generated blocks
SUFFIX = ".md.j2"

#: ``(key, value) -> text``: how a cell's value is written into a page (the paper tags it).
Mark = Callable[[str, str], str]


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

    def count(self, name: str, column: str, **where: str) -> str:
        """How many distinct values ``column`` of ``name``.csv holds (on the rows whose
        columns hold the values ``where`` gives)."""
        frame = self.table(name)
        for col in [column, *where]:
            if col not in frame.columns:
                raise unknown_name(f"column of {name}.csv", col, frame.columns)
        for col, value in where.items():
            frame = frame[frame[col] == value]
        return str(frame[column].nunique())

    def whole(self, name: str, task: str | None = None) -> str:
        """A whole table as Markdown (``faults`` of one ``task``, or as the tables show it)."""
        if name not in TABLES:
            raise unknown_name("table", name, TABLES)
        if name == "faults" and task is not None:
            frame = self.table("faults")
            if task not in set(frame["task"]):
                raise unknown_name("task in faults.csv", task, set(frame["task"]))
            return markdown_table(faults_view(frame, task))
        if name == "scores":
            return markdown_table(scores_view(self.table("scores")))
        if name == "recall":
            return markdown_table(recall_view(self.table("scores")))
        return markdown_table(self.table(name))


@dataclass(frozen=True)
class Defaults:
    """The code's defaults a page may name: settings, not measurements."""

    classic_seeds: int  # seeds per condition of the classic grid
    fault_seeds: int  # runs per fault cell of the full grid in make report
    healthy_seeds: int  # healthy drawn runs per task of the full grid
    every: int  # the Monitor's default sampling


def defaults() -> Defaults:
    """The defaults :class:`Defaults` names, read from the modules that own them."""
    from faultbench.scoring.board import CLASSIC_SEEDS, FAULT_SEEDS, HEALTHY_SEEDS
    from faultbench.training.monitor import DEFAULT_EVERY

    return Defaults(CLASSIC_SEEDS, FAULT_SEEDS, HEALTHY_SEEDS, DEFAULT_EVERY)


def _plain(key: str, value: str) -> str:
    return value


def names(results: Results, *, mark: Mark = _plain, figure: Callable[[str], str]) -> dict[str, Any]:
    """What a template may name: a function per table of :data:`KEYS`, ``count``,
    ``table``, ``figure`` (``figure``: a path under ``results/`` -> its link) and
    ``defaults``."""

    def lookup(kind: str) -> Callable[..., str]:
        def cell(*parts: str) -> str:
            if len(parts) != len(KEYS[kind]) + 1:
                form = ", ".join([*(k.upper() for k in KEYS[kind]), "COLUMN"])
                given = ", ".join(map(repr, parts))
                raise FaultbenchError(f"{kind}({given}) is malformed; expected {kind}({form})")
            return mark(":".join([kind, *parts]), results.cell(kind, parts[:-1], parts[-1]))

        return cell

    def count(name: str, column: str, **where: str) -> str:
        key = ":".join(["count", name, column, *(f"{k}={v}" for k, v in where.items())])
        return mark(key, results.count(name, column, **where))

    def linked(path: str) -> str:
        if not (results.root / path).is_file():
            raise FaultbenchError(
                f"figure '{results.root / path}' not found; run `faultbench report` first"
            )
        return figure(path)

    return {
        **{kind: lookup(kind) for kind in KEYS},
        "count": count,
        "table": results.whole,
        "figure": linked,
        "defaults": defaults(),
    }


def render(source: Path, namespace: dict[str, Any]) -> str:
    """``source`` (a Jinja2 template) rendered with ``namespace``; undefined names are errors.

    Raises:
        FaultbenchError: a syntax error, an undefined name, or an unknown table, row or
            column, as ``SOURCE:LINE: what``.
    """
    import jinja2

    if not source.is_file():
        raise FaultbenchError(f"template '{source}' not found; expected a Markdown template")
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(source.parent),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,  # Markdown; the paper's HTML escapes its own cells
    )
    try:
        return env.get_template(source.name).render(namespace)
    except jinja2.TemplateSyntaxError as exc:
        raise FaultbenchError(f"{source}:{exc.lineno}: {exc.message}") from None
    except jinja2.UndefinedError as exc:
        undefined = re.match(r"'([^']+)' is undefined", str(exc))
        what = str(unknown_name("name", undefined.group(1), namespace)) if undefined else str(exc)
        raise FaultbenchError(f"{source}:{_line(exc, source)}: {what}") from None
    except (FaultbenchError, TypeError) as exc:
        raise FaultbenchError(f"{source}:{_line(exc, source)}: {exc}") from None


def _line(exc: BaseException, source: Path) -> int | str:
    """The template's line an error was raised on (Jinja2 puts the template's own frames,
    with its line numbers, into the traceback)."""
    lines = [
        frame.lineno
        for frame in traceback.extract_tb(exc.__traceback__)
        if Path(frame.filename).name == source.name
    ]
    return lines[-1] if lines and lines[-1] is not None else "?"


#: A generated block of a page: its start marker (which names the template) and end marker.
BLOCK = re.compile(
    r"<!-- results:(?P<name>[\w-]+):start[^>]*-->\n(?P<body>.*?)<!-- results:(?P=name):end -->",
    re.S,
)


def start_marker(name: str) -> str:
    """The line that opens block ``name``: where its text comes from, and where to edit it."""
    return (
        f"<!-- results:{name}:start: written from {(TEMPLATES / name).as_posix()}{SUFFIX} by "
        "faultbench leaderboard and make report; edit the template -->"
    )


def pages_of(project: Path) -> list[Path]:
    """The pages that may hold generated blocks: the README and ``docs/*.md``."""
    return [project / "README.md", *sorted((project / "docs").glob("*.md"))]


def rendered(project: Path, results: Path) -> dict[Path, str]:
    """Each page of ``project`` that holds generated blocks, with every block rendered from
    its template (``docs/templates/NAME.md.j2``) and ``results``.

    Raises:
        FaultbenchError: a block without a template, a template no page uses, or a
            template that names what ``results`` lacks.
    """
    found, used, out = Results(results), set(), {}
    for page in pages_of(project):
        text = page.read_text() if page.is_file() else ""
        blocks = list(BLOCK.finditer(text))
        if not blocks:
            continue
        namespace = names(found, figure=_links(results, page.parent))
        parts, last = [], 0
        for block in blocks:
            name = block.group("name")
            parts += [text[last : block.start()], _block(project, page, name, namespace)]
            used.add(name)
            last = block.end()
        out[page] = "".join([*parts, text[last:]])
    folder = project / TEMPLATES
    unused = sorted(t for t in folder.glob(f"*{SUFFIX}") if t.name[: -len(SUFFIX)] not in used)
    if unused:
        raise FaultbenchError(
            f"{unused[0]} is in no page; expected its block "
            f"<!-- results:{unused[0].name[: -len(SUFFIX)]}:start --> in README.md or docs/"
        )
    return out


def _block(project: Path, page: Path, name: str, namespace: dict[str, Any]) -> str:
    """Block ``name`` of ``page`` as written: its markers around its rendered template."""
    template = project / TEMPLATES / f"{name}{SUFFIX}"
    if not template.is_file():
        raise FaultbenchError(f"{page}: block '{name}' has no template; expected {template}")
    body = render(template, namespace).strip("\n")
    return f"{start_marker(name)}\n{body}\n\n<!-- results:{name}:end -->"


def _links(results: Path, where: Path) -> Callable[[str], str]:
    """A figure's link from a page in ``where``."""
    return lambda path: _relative(results / path, where)


def write_docs(project: Path, results: Path) -> list[Path]:
    """Write every generated block of ``project``'s pages from ``results``; return the pages
    whose text changed. Every page is rendered before any is written, so an error leaves
    each as it was."""
    pages = rendered(project, results)
    changed = [page for page, text in pages.items() if page.read_text() != text]
    for page in changed:
        page.write_text(pages[page])
    return changed


def _relative(target: Path, start: Path) -> str:
    """``target`` as a link from a page in ``start``."""
    import os

    return Path(os.path.relpath(target.resolve(), start.resolve())).as_posix()
