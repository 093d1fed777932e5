"""``faultbench calibrate``: measure each task's working rates, then its severity levels,
then the doctor's false-alarm budget.

All three are versioned data of the repository (``faultbench/faults/rates.csv``,
``levels.csv`` and ``faultbench/scoring/budget.csv``), read by every grid and never
measured by ``faultbench report``: run this when a task, a fault, a check of the doctor
or the training code changes (``make calibrate``). The rates come first: the family's
designs, on which the levels and the budget are measured, train at them. The budget
is measured on the healthy drawn runs of every task the doctor is tuned on, together.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from faultbench.cli.commands.common import add_execution_arguments, engine_from, store_from

if TYPE_CHECKING:
    from faultbench.storage.store import Store
    from faultbench.training.engine import Engine

NAME = "calibrate"
HELP = (
    "measure each task's working rates (rates.csv), then each fault's severity levels "
    "against healthy drawn runs (levels.csv), then the doctor's false-alarm budget on the "
    "healthy drawn runs of its tuned-on tasks (budget.csv)"
)
WHAT = ("all", "rates", "levels", "alarms")


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
        help="rates, levels, alarms, or all (default: rates, then levels, then alarms)",
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

    if args.what == "alarms" and args.task:
        from faultbench.core.errors import FaultbenchError

        raise FaultbenchError(
            f"--what alarms with --task {','.join(args.task)}: the budget is measured on every "
            "task the doctor is tuned on at once; expected no --task"
        )
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
        if args.what == "alarms" or (args.what == "all" and not args.task):
            _alarms(store, engine)
        elif args.what == "all":
            print("alarms: not measured (--task given: the budget needs every tuned-on task)")
    finally:
        engine.close()
    return 0


def _alarms(store: Store, engine: Engine) -> None:
    from faultbench.scoring.budget import write_budget
    from faultbench.tools.alarms import calibrate_alarms

    found = calibrate_alarms(store=store, engine=engine, emit=_say)
    print(f"wrote {write_budget(found)} ({len(found)} thresholds)")


def _say(line: str) -> None:
    print(line, file=sys.stderr)
