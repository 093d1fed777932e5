"""``faultbench leaderboard``: assemble the leaderboard and its site from the result files."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from faultbench.cli.commands.common import (
    add_board_arguments,
    add_runs_argument,
    board_from,
    positive_int,
    store_from,
)

NAME = "leaderboard"
HELP = "assemble results/leaderboard*.md, its csv, figure and site from results/diagnosers/"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``leaderboard``."""
    add_board_arguments(parser)
    parser.add_argument(
        "--verify",
        type=positive_int,
        default=None,
        metavar="K",
        help="first diagnose K answers of each file again, drawn at random, in the diagnoser's "
        "worker with its timeout; refuse a file whose answers or code differ",
    )
    parser.add_argument(
        "--store",
        default=None,
        help="the record store the answers were made on, for --verify and the site's "
        "evidence (default: $FAULTBENCH_STORE or ~/.cache/faultbench/runs)",
    )
    add_runs_argument(parser)


def main(args: argparse.Namespace) -> int:
    """Check every file (and verify a sample of each), then write the leaderboard."""
    import time

    from faultbench.core.errors import FaultbenchError
    from faultbench.reporting import assemble
    from faultbench.reporting.pages import write_docs
    from faultbench.reporting.submission import evidence_from, verify

    start = time.perf_counter()
    board = board_from(args)
    results = Path(args.results)
    assembled = assemble.load(results, board)  # a broken or stale file: exit 2, nothing written
    store = store_from(args)  # --verify re-diagnoses runs read from the dataset
    if args.verify:
        for f in assembled.files:
            differ = verify(f, args.verify, store=store)
            if differ:
                raise FaultbenchError(
                    f"{f.path}: {len(differ)} of {args.verify} answers drawn differ from what "
                    f"'{f.diagnoser}' says now (e.g. {differ[0]}); refresh it: faultbench score "
                    f"--diagnoser {f.source}"
                )
            print(f"verified {f.diagnoser}: {args.verify} answers diagnosed again, the same")
    project = results.resolve().parent  # the README's headline and docs/'s generated blocks
    written = assemble.write(
        assembled, board, results, evidence=evidence_from(store), readme=project / "README.md"
    )
    written += write_docs(project, results)
    print(
        f"leaderboard of {len(assembled.files)} diagnosers: {len(written)} files under "
        f"{results}/ in {time.perf_counter() - start:.1f} s",
        file=sys.stdout,
    )
    return 0
