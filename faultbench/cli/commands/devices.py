"""``faultbench devices``: where does an accelerator start to pay for this job?"""

from __future__ import annotations

import argparse

from faultbench.cli.commands.common import positive_int

NAME = "devices"
HELP = "time the same training at growing sizes on every device, transfers included"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``devices``."""
    parser.add_argument(
        "--quick", action="store_true", help="two widths, two batch sizes, 3 steps (a smoke test)"
    )
    parser.add_argument(
        "--steps", type=positive_int, default=None, help="timed steps per size (default: 20)"
    )


def main(args: argparse.Namespace) -> int:
    """Time, then print the table and where the accelerator pays."""
    from faultbench.tools.devices import (
        QUICK_BATCHES,
        QUICK_STEPS,
        QUICK_WIDTHS,
        STEPS,
        compare_devices,
    )

    if args.quick:
        table = compare_devices(QUICK_WIDTHS, QUICK_BATCHES, steps=args.steps or QUICK_STEPS)
    else:
        table = compare_devices(steps=args.steps or STEPS)
    print(table)
    return 0
