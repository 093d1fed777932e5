"""``faultbench run``: score a diagnoser on a task and print the confusion matrix."""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING

from faultbench.cli.commands.common import (
    add_execution_arguments,
    engine_from,
    positive_int,
    store_from,
)

if TYPE_CHECKING:  # imported where used: `--help` must not load torch or pandas
    import pandas as pd

    from faultbench.scoring.evaluate import Report

NAME = "run"
HELP = "score a diagnoser on every condition of a task"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``run``."""
    parser.add_argument(
        "--diagnoser",
        required=True,
        help="registered name or module:Class (imports and runs that module)",
    )
    parser.add_argument("--task", required=True, help="task name (see `faultbench list`)")
    parser.add_argument(
        "--seeds", type=positive_int, default=5, help="seeds per condition (default: 5)"
    )
    parser.add_argument(
        "--json", action="store_true", help="print one JSON object instead of tables"
    )
    add_execution_arguments(parser)


def main(args: argparse.Namespace) -> int:
    """Evaluate, then print."""
    from faultbench.scoring.diagnosis import get_diagnoser
    from faultbench.scoring.evaluate import evaluate
    from faultbench.tasks.task import get_task

    diagnoser = get_diagnoser(args.diagnoser)  # validate names before starting workers
    task = get_task(args.task)
    engine = engine_from(args)
    try:
        report = evaluate(
            diagnoser,
            task,
            seeds=args.seeds,
            store=store_from(args),
            engine=engine,
            timeout=args.timeout,
        )
    finally:
        engine.close()
    for note in report.notes:
        print(f"faultbench: note: {note}", file=sys.stderr)
    if args.json:
        print(json.dumps(report.to_dict(), allow_nan=False, default=str))
    else:
        print(render(report))
    return 0


def render(report: Report) -> str:
    """The human-readable report."""
    from faultbench.scoring.evaluate import coverage

    kind = "tuned-on" if report.tuned else "held-out"
    tuned_on = ", ".join(report.tuned_on) or "nothing"
    seen = report.manifestation
    cover = coverage(report.results)
    lines = [
        f"{report.diagnoser} on {report.task} ({kind}; tuned on: {tuned_on})",
        "",
        _matrix(report.confusion),
        "",
        f"{report.correct}/{report.total} correct ({kind})",
        "per seed: "
        + ", ".join(
            f"seed {s}: {int(r.correct)}/{int(r.total)}" for s, r in report.seed_scores.iterrows()
        ),
        f"probe steps per diagnosis: {report.mean_probe_steps:.0f} "
        f"(training steps per run: {report.mean_train_steps:.0f})",
        f"faulty runs: {seen['faulty_runs']}, named {seen['named']}, "
        f"missed though the fault showed {seen['missed_visible']}, "
        f"missed with no visible effect {seen['missed_invisible']} "
        f"(no visible effect in all: {seen['invisible']})",
        f"answered (not unknown): {cover['coverage']:.0%}",
        f"runs trained now: {report.trained}",
    ]
    for fault, why in report.not_applicable:
        lines.append(f"not applicable on {report.task}: {fault} ({why})")
    if report.failures:
        lines.append(
            "failed answers (counted wrong): "
            + ", ".join(f"{k}: {v}" for k, v in sorted(report.failures.items()))
        )
    return "\n".join(lines)


def _matrix(frame: pd.DataFrame) -> str:
    import pandas as pd

    with pd.option_context("display.width", 250, "display.max_columns", 50):
        return frame.to_string()
