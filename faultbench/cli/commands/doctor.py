"""``faultbench doctor``: diagnose one benchmark run and print the upgrade checklist."""

from __future__ import annotations

import argparse

from faultbench.cli.commands.common import non_negative_int, store_from

NAME = "doctor"
HELP = (
    "diagnose one run of a task (optionally with a fault) and say whether a bigger machine "
    "would help; exit 0 when the run is healthy, 1 when it is not (or undecided)"
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``doctor``."""
    parser.add_argument("--task", default="digits", help="task name (default: digits)")
    parser.add_argument("--fault", default="healthy", help="fault to inject (default: healthy)")
    parser.add_argument(
        "--seed", type=non_negative_int, default=0, help="the run's seed (default: 0)"
    )
    parser.add_argument(
        "--diagnoser", default="rules", help="registered name or module:Class (default: rules)"
    )
    parser.add_argument(
        "--no-probe", action="store_true", help="passive checks only, as on a run with no probe"
    )
    parser.add_argument(
        "--oom-after-fixes",
        choices=("yes", "no"),
        default=None,
        help="did memory still run out after smaller microbatch, shorter sequences, "
        "activation checkpointing and adapters? (the trace cannot tell)",
    )
    parser.add_argument(
        "--store", default=None, help="record directory (default: $FAULTBENCH_STORE)"
    )


def main(args: argparse.Namespace) -> int:
    """Train (or load) the run, diagnose it, print the report."""
    import dataclasses

    from faultbench.core.errors import FaultbenchError
    from faultbench.faults.fault import condition
    from faultbench.scoring.diagnosis import get_diagnoser
    from faultbench.scoring.evaluate import run_for
    from faultbench.storage.records import RunSpec
    from faultbench.storage.runner import ensure_records
    from faultbench.tasks.task import get_task
    from faultbench.tools.doctor import doctor

    diagnoser = get_diagnoser(args.diagnoser)  # bad names and stores fail before any training
    task = get_task(args.task)
    spec = RunSpec(task.name, task.fingerprint, condition(args.fault, task=task), args.seed)
    store = store_from(args)
    [(_, record, _)] = list(ensure_records([spec], task, store=store))
    if not record.ok:
        raise FaultbenchError(f"the run of '{args.fault}' on '{task.name}' failed: {record.error}")
    run = run_for(record, task)
    if args.no_probe:
        run = dataclasses.replace(run, probe=None)
    oom = None if args.oom_after_fixes is None else args.oom_after_fixes == "yes"
    report = doctor(run, diagnoser, oom_after_cheap_fixes=oom)
    print(f"run: task {task.name}, condition {spec.condition.name}, seed {args.seed}")
    print(report)
    return 0 if report.headline == "healthy" else 1
