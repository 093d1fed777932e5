"""``faultbench list``: every fault, task and diagnoser that can be named, and what it is."""

from __future__ import annotations

import argparse
import inspect
import textwrap
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # imported where used: `--help` must not load torch
    from faultbench.faults.fault import Fault
    from faultbench.tasks.task import Task, TrainDefaults

NAME = "list"
HELP = (
    "list faults (with their variants and knobs), held-out faults, tasks (data, model, "
    "optimizer) and diagnosers"
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``list`` takes no arguments."""


def main(args: argparse.Namespace) -> int:
    """Print the registries, then any plug-in that failed to load."""
    from faultbench.cli.commands.realbugs_run import list_section
    from faultbench.faults.fault import FAULTS, HELD_OUT
    from faultbench.scoring.diagnosis import DIAGNOSERS
    from faultbench.tasks.task import TASKS
    from faultbench.training.instruments import INSTRUMENTS

    _faults()
    _tasks()
    list_section()
    _realbug_fidelity()
    _diagnosers()
    _instruments()
    registries = (FAULTS, HELD_OUT, TASKS, DIAGNOSERS, INSTRUMENTS)
    broken = [(r.kind, name, why) for r in registries for name, why in r.broken.items()]
    for kind, name, why in broken:
        print(f"broken {kind} plug-in '{name}': {why}")
    return 0


def _faults() -> None:
    from faultbench.faults.fault import FAULTS, HEALTHY, HELD_OUT, OTHER_FAULT

    tasks = _buildable_tasks()
    print("conditions (healthy + faults; a variant is named fault.variant, the first is classic):")
    print(f"  {HEALTHY:<22} nothing is broken")
    for name in FAULTS.names():
        _fault(FAULTS.get(name), tasks)
    print(f"held-out faults (no diagnoser is told of them; the answer is {OTHER_FAULT}):")
    for name in HELD_OUT.names():
        _fault(HELD_OUT.get(name), tasks)


def _buildable_tasks() -> list[Task]:
    from faultbench.tasks.task import TASKS, get_task

    tasks = []
    for name in TASKS.names():
        try:
            tasks.append(get_task(name))
        except Exception:  # a task that fails to build: its line under "tasks:" says why
            continue
    return tasks


def _fault(fault: Fault, tasks: list[Task]) -> None:
    """A fault's line, then per variant: what the bug is, where it lives, its knob, the
    tasks it cannot apply to and those whose designs mask it, with the reason."""
    from faultbench.faults.fault import inapplicable
    from faultbench.faults.levels import hidden_on

    print(f"  {fault.name:<22} {fault.summary}")
    for variant in fault.variants:
        sev = variant.severity
        knob = (
            f"severity {sev.canonical:g} ({sev.meaning}; valid {sev.low:g}..{sev.high:g})"
            if sev
            else "no severity knob"
        )
        where = f"in the {variant.lives.replace('+', ' and ')}" if variant.lives else "plug-in"
        print(f"    .{variant.name:<19} {variant.summary}")
        print(f"    {'':<20} {where}; {knob}")
        for task in tasks:
            ident = fault.variant_id(variant)
            if why := inapplicable(ident, task):
                print(f"    {'':<20} not on {task.name}: {why}")
            elif why := hidden_on(task.name).get(ident, ""):
                print(f"    {'':<20} not in {task.name}'s full grid, masked by its designs: {why}")


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
            f"  {'':<22} reference recipe: {d.architecture}, hidden {d.hidden}; "
            f"{len(task.y_train)} train / {len(task.y_val)} val, {task.n_features} features, "
            f"{task.n_classes} classes; {_optimizer(d)}, batch {d.batch_size}, {d.steps} steps"
        )
        _family(task)


def _family(task: Task) -> None:
    """The task's family of healthy designs: its axes and their values, and the rates."""
    from faultbench.faults.family import describe_family, measured, working_rates
    from faultbench.storage.bases import CRITERION

    rates = ", ".join(f"{k} {v:g}" for k, v in working_rates(task).items())
    how = "measured" if measured(task) else "canonical, not measured: faultbench calibrate"
    indent = " " * 26
    print(f"  {'':<22} family: the full grid draws one base per run from these axes;")
    print(
        textwrap.fill(
            f"kept if healthy: {CRITERION}", 100, initial_indent=indent, subsequent_indent=indent
        )
    )
    for axis, values in [
        *describe_family(task.design_family()),
        ("working rates", f"{rates} ({how})"),
    ]:
        print(
            textwrap.fill(
                values,
                100,
                initial_indent=f"{indent}{axis + ':':<15} ",
                subsequent_indent=indent + " " * 16,
            )
        )


def _realbug_fidelity() -> None:
    """Per real-bug case: its kind and label, what stands in for the source's data, model
    and code (own: the source's), and whether the reporter saw the failure."""
    from faultbench.realbugs import OWN, all_cases
    from faultbench.realbugs.case import FAITHFUL

    cases = all_cases()
    faithful = sum(case.faithful for case in cases)
    print(f"  fidelity ({faithful} of {len(cases)} faithful: {FAITHFUL}):")
    print(f"  {'case':<44} {'kind':<15} {'label':<21} data  model code  observed")
    for case in cases:
        own = ["own" if v == OWN else "stand" for v in case.fidelity]
        seen = "yes" if case.observed else "no, read from code"
        print(
            f"  {case.name:<44} {case.kind:<15} {case.label:<21} {own[0]:<5} {own[1]:<5} "
            f"{own[2]:<5} {seen}"
        )


def _diagnosers() -> None:
    from faultbench.core.errors import FaultbenchError
    from faultbench.scoring.contract import contract_of
    from faultbench.scoring.diagnosis import DIAGNOSERS, get_diagnoser

    print("diagnosers:")
    for name in DIAGNOSERS.names():
        try:
            diagnoser = get_diagnoser(name)
        except Exception as exc:  # a plug-in that fails to build breaks only its line
            print(f"  {name:<22} cannot be built: {type(exc).__name__}: {exc}")
            continue
        tuned = ", ".join(sorted(diagnoser.tuned_on)) or "nothing"
        try:
            declared = contract_of(diagnoser)
        except FaultbenchError as exc:  # a plug-in that breaks its contract: its line only
            print(f"  {name:<22} breaks the diagnoser contract: {exc}")
            continue
        probes = declared.probes
        probing = "not declared" if probes is None else ("yes" if probes else "no")
        print(f"  {name:<22} {_first_line(type(diagnoser)) or 'no description'}")
        asked = ", ".join(declared.instrument)
        watches = f"; instrument in the loop: {asked}" if asked else ""
        print(f"  {'':<22} tuned on: {tuned}; probes: {probing}{watches}")


def _instruments() -> None:
    from faultbench.training.instruments import INSTRUMENTS

    print("instruments (code a diagnoser attaches to the training loop):")
    for name in INSTRUMENTS.names():
        factory = INSTRUMENTS.get(name)
        # The module's first line: the class's docstring is part of the code that keys
        # an instrument's runs, and is written for the reader of the code.
        print(f"  {name:<22} {_first_line(inspect.getmodule(factory)) or 'no description'}")
        if getattr(factory, "own_process", False):
            print(f"  {'':<22} each run trains in a process of its own (it patches libraries)")


def _optimizer(d: TrainDefaults) -> str:
    if d.optimizer == "sgd":
        return f"SGD lr {d.lr:g} momentum {d.momentum:g}"
    names = {"adam": "Adam", "adamw": "AdamW", "rmsprop": "RMSprop"}
    return f"{names.get(d.optimizer, d.optimizer)} lr {d.lr:g}"


def _first_line(obj: object) -> str:
    doc = inspect.getdoc(obj) or ""
    return doc.strip().splitlines()[0] if doc.strip() else ""
