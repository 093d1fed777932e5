"""``faultbench check``: run the conformance checks on a diagnoser."""

from __future__ import annotations

import argparse

NAME = "check"
HELP = "run the conformance checks on a diagnoser (exit 1 if one fails)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``check``."""
    parser.add_argument(
        "diagnoser", help="registered name or module:Class (imports and runs that module)"
    )


def main(args: argparse.Namespace) -> int:
    """Run every check, print one line per check, return 1 if any failed."""
    from faultbench.scoring.diagnosis import get_diagnoser
    from faultbench.tools.checks import run_checks

    diagnoser = get_diagnoser(args.diagnoser)  # bad names exit 2 before any training
    results = run_checks(diagnoser)
    for result in results:
        status = "PASS" if result.passed else "FAIL"
        print(f"{status} {result.name}" + (f": {result.message}" if result.message else ""))
    failed = [r.name for r in results if not r.passed]
    if failed:
        print(
            f"{args.diagnoser}: {len(failed)} of {len(results)} checks failed: {', '.join(failed)}"
        )
        return 1
    print(f"{args.diagnoser}: all {len(results)} checks passed")
    return 0
