"""``faultbench list``: every fault, task and diagnoser that can be named, and what it is."""

from __future__ import annotations

import argparse
import inspect
import textwrap
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # imported where used: `--help` must not load torch
    from faultbench.faults.fault import Fault
    from faultbench.storage.store import Store
    from faultbench.tasks.task import Task

NAME = "list"
HELP = (
    "list faults (with their variants and knobs), held-out faults, tasks by kind (data, "
    "model, family, time per run) and diagnosers"
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``--store``: where the time per run of each task's reference recipe is read from."""
    parser.add_argument(
        "--store",
        default=None,
        help="record directory the time per run is read from, as its stored reference runs "
        "measured it (default: $FAULTBENCH_STORE or ~/.cache/faultbench/runs)",
    )


def main(args: argparse.Namespace) -> int:
    """Print the registries, then any plug-in that failed to load."""
    from faultbench.cli.commands.realbugs_run import list_section
    from faultbench.faults.fault import FAULTS, HELD_OUT
    from faultbench.scoring.diagnosis import DIAGNOSERS
    from faultbench.storage.store import Store
    from faultbench.tasks.task import TASKS
    from faultbench.training.instruments import INSTRUMENTS

    _faults()
    _tasks(Store(args.store))
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


def _tasks(store: Store) -> None:
    """Every kind a task can be, its shipped and plug-in tasks under it."""
    from faultbench.tasks.kinds import KINDS
    from faultbench.tasks.task import TASKS, get_task

    print(
        "tasks, by kind (time per run: the median training time of the task's stored reference "
        "runs, measured\nwhere they trained; tuned-on or held-out is each diagnoser's, below):"
    )
    built: list[Task] = []
    for name in TASKS.names():
        try:
            built.append(get_task(name))
        except Exception as exc:  # a plug-in task that fails to build breaks only its line
            print(f"  {name:<22} cannot be built: {type(exc).__name__}: {exc}")
    for kind in KINDS.values():
        print(f"  {kind.name}: {kind.summary}; score {kind.score}, loss {kind.loss_name}")
        tasks = [task for task in built if task.kind.name == kind.name]
        for task in tasks:
            _task(task, store)
        if not tasks:
            print("    no task of this kind")


def _task(task: Task, store: Store) -> None:
    """A task's lines: what it is, its data and reference recipe, its time per run, its family."""
    from faultbench.tasks.task import TASKS

    d = task.defaults
    shown = TASKS.get(task.name) if task.name in TASKS else None
    print(f"    {task.name:<21} {_first_line(shown) or 'no description'}")
    codes = f" and {len(task.code_sizes)} code columns" if task.code_sizes else ""
    lines = [
        f"reference recipe: {task.reference_design().describe()}, {d.steps} steps",
        f"{len(task.y_train)} train / {len(task.y_val)} val, {task.n_features} features{codes}, "
        f"{_outputs(task)}",
        f"time per run: {_seconds(task, store)}",
    ]
    for line in lines:
        print(textwrap.fill(line, 100, initial_indent=" " * 26, subsequent_indent=" " * 28))
    _family(task)


def _outputs(task: Task) -> str:
    """What the model outputs per example, in the kind's words."""
    n = task.n_outputs
    words = {
        "binary": "1 logit",
        "multilabel": f"{n} labels",
        "regression": f"{n} target{'s' if n > 1 else ''}",
        "reconstruction": f"{n} values rebuilt",
    }
    return words.get(task.kind.name, f"{task.n_classes} classes")


def _seconds(task: Task, store: Store) -> str:
    """The task's time per run as its stored reference runs measured it, or why there is none."""
    import statistics

    from faultbench.faults.fault import Condition
    from faultbench.storage.bases import REFERENCE_SEEDS
    from faultbench.storage.records import RunSpec

    seconds = []
    for seed in range(REFERENCE_SEEDS):
        spec = RunSpec(task.name, task.fingerprint, Condition(), seed)
        record = store.load(spec, note=False, copy=False) if store.attempts(spec) else None
        if record is not None:
            seconds.append(record.seconds)
    if not seconds:
        return (
            "not measured yet: no reference run of this code is stored "
            f"(faultbench run --task {task.name} trains {REFERENCE_SEEDS})"
        )
    return (
        f"{statistics.median(seconds):.2f} s (measured: the median of {len(seconds)} stored "
        "reference runs, recorded every step)"
    )


def _family(task: Task) -> None:
    """The task's family of healthy designs: its axes and their values, and the rates."""
    from faultbench.faults.family import describe_family, measured, working_rates
    from faultbench.storage.bases import CRITERION

    rates = ", ".join(f"{k} {v:g}" for k, v in working_rates(task).items())
    how = "measured" if measured(task) else "canonical, not measured: faultbench calibrate"
    indent = " " * 26
    print(f"{indent}family: the full grid draws one base per run from these axes;")
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


def _first_line(obj: object) -> str:
    doc = inspect.getdoc(obj) or ""
    return doc.strip().splitlines()[0] if doc.strip() else ""
