"""``faultbench calibrate``: measure each task's working rates, then its severity levels.

Both are versioned data of the repository (``faultbench/faults/rates.csv`` and
``levels.csv``), read by every grid and never measured by ``faultbench report``:
run this when a task, a fault or the training code changes (``make calibrate``).
The rates come first: the family's designs, on which the levels are measured,
train at them.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from faultbench.cli.commands.common import add_execution_arguments, engine_from, store_from

NAME = "calibrate"
HELP = (
    "measure each task's working rates (rates.csv), then each fault's severity levels "
    "against healthy drawn runs (levels.csv)"
)
WHAT = ("all", "rates", "levels")


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
        "--what",
        choices=WHAT,
        default="all",
        help="rates, levels, or all (default: rates, then levels)",
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
    from faultbench.faults.family import load_rates, write_rates
    from faultbench.faults.levels import LEVELS_FILE, load_levels, write_levels
    from faultbench.tasks.task import get_task, task_names
    from faultbench.tools.calibrate import calibrate
    from faultbench.tools.rates import sweep_rates

    tasks = [get_task(name) for name in dict.fromkeys(args.task or task_names())]
    out = args.out or LEVELS_FILE
    if out.exists() and out.is_dir():
        from faultbench.core.errors import FaultbenchError

        raise FaultbenchError(f"--out '{out}' is a directory; expected the levels file (a .csv)")
    store = store_from(args)
    engine = engine_from(args)
    names = {t.name for t in tasks}
    try:
        if args.what in ("all", "rates"):
            points = [p for p in load_rates() if p.task not in names]
            for task in tasks:
                points += sweep_rates(task, store=store, engine=engine, emit=_say)
            print(f"wrote {write_rates(points)} ({len(points)} sweep points)")
        if args.what in ("all", "levels"):
            levels = [lv for lv in load_levels(out) if lv.task not in names]
            for task in tasks:
                levels += calibrate(task, store=store, engine=engine, emit=_say)[0]
            print(f"wrote {write_levels(levels, out)} ({len(levels)} levels)")
    finally:
        engine.close()
    return 0


def _say(line: str) -> None:
    print(line, file=sys.stderr)
