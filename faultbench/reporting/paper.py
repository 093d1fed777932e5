"""Builds the paper: a Jinja2 template of Markdown, filled from ``results/``, rendered to HTML.

The source (``paper/paper.md.j2``) never holds a number: each one is a call that
names its cell in the CSV files ``faultbench report`` wrote
(:mod:`faultbench.reporting.pages`: ``{{ faults("digits", "huge_inputs",
"first_loss_mean") }}``, ``{{ table("scores") }}``, ``{{ figure("leaderboard.png") }}``),
resolved at build time. An undefined name, table, row or column fails the build naming
the source's line, so the paper cannot cite a number that ``results/`` does not hold.
Each number is written inside ``<span class="num" data-key="...">``, so a reader (and
the test) can trace it to its cell; each figure is copied next to the HTML.
"""

from __future__ import annotations

import html
import shutil
from pathlib import Path

import markdown

from faultbench.reporting.pages import Results, names, render

STYLE = """body{font-family:Georgia,serif;max-width:60em;margin:2em auto;padding:0 1em;
line-height:1.5;color:#222}table{border-collapse:collapse;margin:1em 0;font-size:.85em}
th,td{border:1px solid #bbb;padding:.2em .5em;text-align:right}th{background:#eee}
td:first-child,th:first-child{text-align:left}img{max-width:100%}code{font-size:.9em}"""


def tagged(key: str, value: str) -> str:
    """A number as the paper writes it: tagged with the cell it came from."""
    return f'<span class="num" data-key="{html.escape(key)}">{html.escape(value)}</span>'


def copied_name(path: str) -> str:
    """Where a figure under ``results/`` goes, next to the HTML."""
    return f"figures/{'-'.join(Path(path).parts)}"


def build(source: Path, results_dir: Path, out: Path) -> Path:
    """Fill ``source`` from ``results_dir`` and write the HTML (and its figures) to ``out``.

    Returns:
        ``out``.

    Raises:
        FaultbenchError: the source is missing, or names what ``results_dir`` lacks
            (nothing is written then).
    """
    figures: list[str] = []

    def figure(path: str) -> str:
        figures.append(path)
        return copied_name(path)

    namespace = names(Results(results_dir), mark=tagged, figure=figure)
    text = render(source, namespace)
    body = markdown.markdown(text, extensions=["tables", "toc"])
    title = next((line[2:].strip() for line in text.splitlines() if line.startswith("# ")), "")
    out.parent.mkdir(parents=True, exist_ok=True)
    for path in figures:
        target = out.parent / copied_name(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(results_dir / path, target)
    page = (
        f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{html.escape(title)}</title><style>{STYLE}</style></head>\n"
        f"<body>\n{body}\n</body></html>\n"
    )
    out.write_text(page)
    return out
