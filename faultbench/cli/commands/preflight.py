"""``faultbench preflight``: six gated phases of one training step on a task."""

from __future__ import annotations

import argparse

NAME = "preflight"
HELP = (
    "check data, forward and loss, backward, update, validation and resume on one step of a "
    "task's setup; exit 0 when every gate passes, 1 when one fails"
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``preflight``."""
    parser.add_argument("--task", default="digits", help="task name (default: digits)")
    parser.add_argument("--fault", default="healthy", help="fault to inject (default: healthy)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the model and batches")
    parser.add_argument("--device", default="cpu", help="cpu, cuda, cuda:N or mps (default: cpu)")
    parser.add_argument(
        "--break-checkpoint",
        default=None,
        help="break the checkpoint on purpose before the reload: truncate or drop_optimizer",
    )


def main(args: argparse.Namespace) -> int:
    """Build the task's pilot, run the gates, print the table."""
    from faultbench.faults.fault import condition
    from faultbench.tasks.task import get_task
    from faultbench.tools.preflight import pilot_for_task, preflight

    # Unknown names, and a variant that cannot apply to the task, fail here with one line.
    cond = condition(args.fault, task=get_task(args.task))
    pilot = pilot_for_task(args.task, cond, seed=args.seed)
    report = preflight(
        pilot, device=args.device, seed=args.seed, break_checkpoint=args.break_checkpoint
    )
    print(f"task {args.task}, condition {cond.name}, seed {args.seed}")
    print(report)
    return 0 if report.passed else 1
