"""``faultbench check``: run the conformance checks on a diagnoser."""

from __future__ import annotations

import argparse

NAME = "check"
HELP = (
    "check a diagnoser's declared contract, then run the conformance checks (exit 1 if one fails)"
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``check``."""
    parser.add_argument(
        "diagnoser", help="registered name or module:Class (imports and runs that module)"
    )


def main(args: argparse.Namespace) -> int:
    """Run every check, print one line per check, return 1 if any failed."""
    from faultbench.scoring.diagnosis import load
    from faultbench.tools.checks import run_checks

    diagnoser = load(args.diagnoser)  # bad names exit 2 before any training
    results = run_checks(diagnoser)  # type: ignore[arg-type]  # its contract is the first check
    for result in results:
        status = "PASS" if result.passed else "FAIL"
        for line in result.message.splitlines() or [""]:  # one line per failure
            print(f"{status} {result.name}" + (f": {line}" if line else ""))
    failed = [r.name for r in results if not r.passed]
    if failed:
        print(
            f"{args.diagnoser}: {len(failed)} of {len(results)} checks failed: {', '.join(failed)}"
        )
        return 1
    print(f"{args.diagnoser}: all {len(results)} checks passed")
    return 0
