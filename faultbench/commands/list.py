"""``faultbench list``: the faults, tasks and diagnosers that can be named."""

from __future__ import annotations

import argparse

NAME = "list"
HELP = "list faults (with canonical severities), tasks and diagnosers"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``list`` takes no arguments."""


def main(args: argparse.Namespace) -> int:
    """Print the three registries."""
    from faultbench.diagnosis import diagnoser_names, get_diagnoser
    from faultbench.faults import FAULTS, HEALTHY
    from faultbench.tasks import get_task, task_names

    print("conditions (healthy + faults):")
    print(f"  {HEALTHY:<22} nothing is broken")
    for name in FAULTS.names():
        fault = FAULTS.get(name)
        sev = fault.severity
        knob = (
            f"severity {sev.canonical:g} ({sev.meaning}; valid {sev.low:g}..{sev.high:g})"
            if sev
            else "no severity knob"
        )
        print(f"  {name:<22} {fault.summary}; {knob}")
    print("tasks:")
    for name in task_names():
        print(f"  {name:<22} {get_task(name)!r}")
    print("diagnosers:")
    for name in diagnoser_names():
        d = get_diagnoser(name)
        print(f"  {name:<22} tuned on: {', '.join(sorted(d.tuned_on)) or 'nothing'}")
    return 0
