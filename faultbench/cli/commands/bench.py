"""``faultbench bench``: how fast the benchmark is on this machine."""

from __future__ import annotations

import argparse
from pathlib import Path

NAME = "bench"
HELP = "measure recording overhead, probe cost, parallel efficiency, wall times and memory"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``bench``."""
    parser.add_argument(
        "--quick",
        action="store_true",
        help="fewer repetitions and one seed: shows every figure in well under a minute, "
        "but the full run's figures are the ones to quote",
    )
    parser.add_argument(
        "--results",
        default=None,
        metavar="DIR",
        help="also write the figures to DIR/bench.csv and DIR/bench.md (make bench: results)",
    )


def main(args: argparse.Namespace) -> int:
    """Measure and print; exit 0 even when a goal is missed (the figures say so)."""
    from faultbench.tools.bench import run_bench

    lines: list[str] = []

    def emit(line: str) -> None:
        lines.append(line)
        print(line, flush=True)

    figures = run_bench(quick=args.quick, emit=emit)
    if args.results is not None:
        from faultbench.tools.bench_results import write

        command = "faultbench bench" + (" --quick" if args.quick else "")
        for path in write(figures, Path(args.results), header=lines[0], command=command):
            print(f"wrote {path}")
    return 0
