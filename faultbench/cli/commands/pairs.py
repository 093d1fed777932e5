"""``faultbench pairs``: score a diagnoser on runs with two faults at once."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from faultbench.cli.commands.common import (
    add_execution_arguments,
    engine_from,
    isolate_from,
    positive_int,
    store_from,
)

NAME = "pairs"
HELP = "score a diagnoser on every compatible pair of faults (exact set, hit, Jaccard, recall)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``pairs``."""
    parser.add_argument("--diagnoser", required=True, help="registered name or module:Class")
    parser.add_argument("--task", required=True, help="task name")
    parser.add_argument("--seeds", type=positive_int, default=2, help="seeds per pair")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument(
        "--out", type=Path, default=Path("results/pairs"), help="where the tables go"
    )
    add_execution_arguments(parser)


def main(args: argparse.Namespace) -> int:
    """Evaluate on the pair grid, print and save the multi-label scores."""
    from faultbench.reporting.pairs import pair_conditions, save_pairs, score_pairs
    from faultbench.scoring.diagnosis import get_diagnoser
    from faultbench.scoring.evaluate import evaluate
    from faultbench.tasks.task import get_task

    get_diagnoser(args.diagnoser)  # the names are checked before any work
    task = get_task(args.task)
    store = store_from(args)
    engine = engine_from(args)
    try:
        report = evaluate(
            args.diagnoser,  # by name: a shipped diagnoser's answers are stored and read back
            task,
            seeds=args.seeds,
            conditions=pair_conditions(task=task),
            store=store,
            engine=engine,
            timeout=args.timeout,
            isolate=isolate_from(args),
        )
    finally:
        engine.close()
    score = score_pairs(report.results)
    paths = save_pairs(report, score, args.out)
    if args.json:
        print(json.dumps(score.to_dict() | {"diagnoser": report.diagnoser, "task": report.task}))
    else:
        print(paths[1].read_text())
    return 0
