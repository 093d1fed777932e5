"""``faultbench paper``: build the paper from ``paper/paper.md.j2`` and ``results/``."""

from __future__ import annotations

import argparse
from pathlib import Path

NAME = "paper"
HELP = "build paper/build/paper.html, every number filled in from results/"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``paper``."""
    parser.add_argument(
        "--source",
        default="paper/paper.md.j2",
        help="the Jinja2 template of Markdown (default: paper/paper.md.j2)",
    )
    parser.add_argument(
        "--results",
        default="results",
        help="the directory `faultbench report` wrote (default: results)",
    )
    parser.add_argument(
        "--out",
        default="paper/build/paper.html",
        help="HTML to write (default: paper/build/paper.html)",
    )


def main(args: argparse.Namespace) -> int:
    """Build, then say where the HTML is."""
    from faultbench.reporting.paper import build

    path = build(Path(args.source), Path(args.results), Path(args.out))
    print(f"wrote {path}")
    return 0
