"""``faultbench calibrate``: choose every fault's mild, moderate and severe severity per task."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from faultbench.cli.commands.common import add_execution_arguments, engine_from, store_from

NAME = "calibrate"
HELP = "measure each fault's severities against healthy runs and write the levels file"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``calibrate``."""
    parser.add_argument(
        "--task",
        action="append",
        default=None,
        metavar="NAME",
        help="a task to calibrate; repeat for more (default: every registered); "
        "the other tasks' levels in the file are kept",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help="the levels file (default: the one the grid reads, faultbench/faults/levels.csv)",
    )
    add_execution_arguments(parser)


def main(args: argparse.Namespace) -> int:
    """Check the names and the store, calibrate, write the file."""
    from faultbench.faults.levels import LEVELS_FILE, load_levels, write_levels
    from faultbench.tasks.task import get_task, task_names
    from faultbench.tools.calibrate import calibrate

    tasks = [get_task(name) for name in dict.fromkeys(args.task or task_names())]
    out = args.out or LEVELS_FILE
    if out.exists() and out.is_dir():
        from faultbench.core.errors import FaultbenchError

        raise FaultbenchError(f"--out '{out}' is a directory; expected the levels file (a .csv)")
    store = store_from(args)
    engine = engine_from(args)
    names = {t.name for t in tasks}
    levels = [lv for lv in load_levels(out) if lv.task not in names]
    try:
        for task in tasks:
            found, _ = calibrate(
                task, store=store, engine=engine, emit=lambda line: print(line, file=sys.stderr)
            )
            levels += found
    finally:
        engine.close()
    print(f"wrote {write_levels(levels, out)} ({len(levels)} levels)")
    return 0
