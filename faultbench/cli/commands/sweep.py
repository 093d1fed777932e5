"""``faultbench sweep``: recall against severity for one fault and one diagnoser."""

from __future__ import annotations

import argparse
from pathlib import Path

from faultbench.cli.commands.common import (
    add_execution_arguments,
    engine_from,
    isolate_from,
    positive_int,
    store_from,
)
from faultbench.core.errors import FaultbenchError

NAME = "sweep"
HELP = "run a fault over a range of severities and report recall against severity"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``sweep``."""
    parser.add_argument("--fault", required=True, help="a fault with a severity knob")
    parser.add_argument("--diagnoser", required=True, help="registered name or module:Class")
    parser.add_argument("--task", required=True, help="task name")
    parser.add_argument("--seeds", type=positive_int, default=3, help="seeds per severity")
    parser.add_argument(
        "--severities", default=None, help="comma-separated values (default: a grid of the range)"
    )
    parser.add_argument(
        "--out", type=Path, default=Path("results/sweeps"), help="where the table and plot go"
    )
    add_execution_arguments(parser)


def _values(text: str | None) -> list[float] | None:
    if text is None:
        return None
    try:
        return [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise FaultbenchError(
            f"--severities '{text}' is not a comma-separated list of numbers"
        ) from None


def main(args: argparse.Namespace) -> int:
    """Sweep, print, save."""
    from faultbench.faults.fault import FAULTS
    from faultbench.reporting.sweep import save_sweep, sweep, sweep_markdown
    from faultbench.scoring.diagnosis import get_diagnoser
    from faultbench.tasks.task import get_task

    values = _values(args.severities)
    FAULTS.get(args.fault)  # every name and the store are checked before any worker starts
    get_diagnoser(args.diagnoser)
    task = get_task(args.task)
    store = store_from(args)
    engine = engine_from(args)
    try:
        result = sweep(
            args.fault,
            args.diagnoser,  # by name: a shipped diagnoser's answers are stored and read back
            task,
            severities=values,
            seeds=args.seeds,
            store=store,
            engine=engine,
            timeout=args.timeout,
            isolate=isolate_from(args),
        )
    finally:
        engine.close()
    print(sweep_markdown(result))
    for path in save_sweep(result, args.out):
        print(f"wrote {path}")
    return 0
