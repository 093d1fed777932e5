"""``faultbench list``: every fault, task and diagnoser that can be named, and what it is."""

from __future__ import annotations

import argparse
import inspect

NAME = "list"
HELP = "list faults (with their knobs), tasks (data, model, optimizer) and diagnosers"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``list`` takes no arguments."""


def main(args: argparse.Namespace) -> int:
    """Print the three registries, then any plug-in that failed to load."""
    from faultbench.faults.fault import FAULTS
    from faultbench.scoring.diagnosis import DIAGNOSERS
    from faultbench.tasks.task import TASKS

    _faults()
    _tasks()
    _diagnosers()
    broken = [
        (r.kind, name, why) for r in (FAULTS, TASKS, DIAGNOSERS) for name, why in r.broken.items()
    ]
    for kind, name, why in broken:
        print(f"broken {kind} plug-in '{name}': {why}")
    return 0


def _faults() -> None:
    from faultbench.faults.fault import FAULTS, HEALTHY

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


def _tasks() -> None:
    from faultbench.tasks.task import TASKS, get_task

    print("tasks:")
    for name in TASKS.names():
        try:
            task = get_task(name)
        except Exception as exc:  # a plug-in task that fails to build breaks only its line
            print(f"  {name:<22} cannot be built: {type(exc).__name__}: {exc}")
            continue
        d = task.defaults
        print(f"  {name:<22} {_first_line(TASKS.get(name)) or 'no description'}")
        print(
            f"  {'':<22} {d.architecture}, hidden {d.hidden}; {len(task.y_train)} train / "
            f"{len(task.y_val)} val, {task.n_features} features, {task.n_classes} classes; "
            f"Adam lr {d.lr:g}, batch {d.batch_size}, {d.steps} steps"
        )


def _diagnosers() -> None:
    from faultbench.scoring.diagnosis import DIAGNOSERS, get_diagnoser

    print("diagnosers:")
    for name in DIAGNOSERS.names():
        try:
            diagnoser = get_diagnoser(name)
        except Exception as exc:  # a plug-in that fails to build breaks only its line
            print(f"  {name:<22} cannot be built: {type(exc).__name__}: {exc}")
            continue
        tuned = ", ".join(sorted(diagnoser.tuned_on)) or "nothing"
        probes = getattr(diagnoser, "probes", None)
        probing = "not declared" if probes is None else ("yes" if probes else "no")
        print(f"  {name:<22} {_first_line(type(diagnoser)) or 'no description'}")
        print(f"  {'':<22} tuned on: {tuned}; probes: {probing}")


def _first_line(obj: object) -> str:
    doc = inspect.getdoc(obj) or ""
    return doc.strip().splitlines()[0] if doc.strip() else ""
