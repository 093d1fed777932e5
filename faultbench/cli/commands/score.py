"""``faultbench score``: score one diagnoser on the leaderboard's board, into its result file."""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

from faultbench.cli.commands.common import (
    add_board_arguments,
    add_execution_arguments,
    board_from,
    engine_from,
    isolate_from,
    store_from,
)

NAME = "score"
HELP = "score a diagnoser on every suite of the leaderboard into results/diagnosers/NAME.*"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``score``."""
    parser.add_argument(
        "--diagnoser",
        required=True,
        metavar="NAME",
        help="a registered name or module:Class (imports and runs that module)",
    )
    add_board_arguments(parser)
    add_execution_arguments(parser)


def main(args: argparse.Namespace) -> int:
    """Check the arguments, score, write the result file; print where and how long."""
    import time

    from faultbench.reporting import resultfile
    from faultbench.reporting.provenance import other_bits_note
    from faultbench.reporting.submission import score
    from faultbench.scoring import answers
    from faultbench.scoring.cache import reads_every_step
    from faultbench.scoring.contract import contract_of
    from faultbench.scoring.diagnosis import get_diagnoser

    contract_of(get_diagnoser(args.diagnoser))  # a broken contract exits 2 before any work
    store = store_from(args)
    # The every-step columns where the runs can be read at every step (not from the lite
    # runs dataset alone) or its every-step answers ship; the leaderboard says who lacks them.
    board = replace(board_from(args), every_step=reads_every_step(store, args.diagnoser))
    folder = Path(args.results) / resultfile.FOLDER
    if folder.exists() and not folder.is_dir():
        raise_not_folder(folder)
    start = time.perf_counter()
    engine = engine_from(args)
    try:
        result, reports = score(
            args.diagnoser,
            board,
            store=store,
            engine=engine,
            timeout=args.timeout,
            isolate=isolate_from(args),
            # its answers exported as they are made: an interrupted score keeps them
            keep_answers=folder / f"{get_diagnoser(args.diagnoser).name}{answers.SUFFIX}",
        )
    finally:
        engine.close()
    for note in dict.fromkeys(n for r in reports for n in r.notes):
        print(f"faultbench: note: {note}", file=sys.stderr)
    if bits := other_bits_note():
        print(f"faultbench: note: {bits}", file=sys.stderr)
    written = resultfile.write(result, folder)
    trained = sum(r.trained for r in reports)
    print(
        f"{result.diagnoser}: {len(result.answers)} answers ({trained} runs trained) in "
        f"{time.perf_counter() - start:.1f} s: {written[0]} (+ .csv); add it to the "
        "leaderboard: faultbench leaderboard"
    )
    return 0


def raise_not_folder(folder: Path) -> None:
    """Refuse a results path that holds a file where the folder goes."""
    from faultbench.core.errors import FaultbenchError

    raise FaultbenchError(f"'{folder}' is a file; expected a folder for the result files")
