"""``faultbench run``: score a diagnoser on a task and print the confusion matrix."""

from __future__ import annotations

import argparse
import json
import sys

from faultbench.cli.commands import realbugs_run
from faultbench.cli.commands.common import (
    add_execution_arguments,
    add_grid_arguments,
    engine_from,
    grid_from,
    isolate_from,
    positive_int,
    store_from,
)

NAME = "run"
HELP = "score a diagnoser on a grid of runs of a task (the full grid by default)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``run``."""
    parser.add_argument(
        "--diagnoser",
        required=True,
        help="registered name or module:Class (imports and runs that module)",
    )
    parser.add_argument(
        "--task",
        required=True,
        help="task name, or realbugs for the real-bug suite (see `faultbench list`)",
    )
    parser.add_argument(
        "--seeds", type=positive_int, default=5, help="seeds per condition (default: 5)"
    )
    parser.add_argument(
        "--json", action="store_true", help="print one JSON object instead of tables"
    )
    add_grid_arguments(parser)
    parser.add_argument(
        "--cases",
        type=realbugs_run.names,
        default=None,
        help="with --task realbugs: comma-separated cases to score",
    )
    add_execution_arguments(parser)


def main(args: argparse.Namespace) -> int:
    """Check every argument, evaluate, then print."""
    from faultbench.scoring.diagnosis import get_diagnoser
    from faultbench.scoring.evaluate import evaluate
    from faultbench.tasks.task import get_task

    realbugs_run.check_arguments(args)
    if args.task == realbugs_run.SUITE:  # the real-bug suite is no Task
        return realbugs_run.main(args)
    diagnoser = get_diagnoser(args.diagnoser)  # every check before any worker starts
    task = get_task(args.task)
    grid = grid_from(args)
    store = store_from(args)
    engine = engine_from(args)
    try:
        report = evaluate(
            diagnoser,
            task,
            seeds=args.seeds,
            **grid,
            store=store,
            engine=engine,
            timeout=args.timeout,
            isolate=isolate_from(args),
        )
    finally:
        engine.close()
    for note in report.notes:
        print(f"faultbench: note: {note}", file=sys.stderr)
    if args.json:
        print(json.dumps(report.to_dict(), allow_nan=False, default=str))
    else:
        print(report)
    return 0
