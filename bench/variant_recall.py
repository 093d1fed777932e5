"""A diagnoser's recall per fault variant, and what it says about the held-out faults.

Every variant of every fault that applies to the task, at its canonical
severity, over the seeds: the share of runs the diagnoser named with the
variant's fault (its label). For each held-out fault: the share it called
healthy, and the share it called ``other_fault``. Runs are trained into the
store as ``faultbench run`` does (and reused from it).

    .venv/bin/python bench/variant_recall.py --diagnoser rules --tasks digits,synthetic \\
        --seeds 5 --store /tmp/faults-store
"""

from __future__ import annotations

import argparse
from collections import Counter

import torch

from faultbench.faults.fault import HEALTHY, OTHER_FAULT, condition, variant_conditions
from faultbench.scoring.evaluate import RunResult, evaluate
from faultbench.storage.store import Store
from faultbench.tasks.task import get_task
from faultbench.training.engine import LocalEngine


def _row(ident: str, results: list[RunResult]) -> str:
    """One table row: the variant, its recall (or for a held-out fault: healthy and
    other_fault shares), and every answer with its count."""
    cond = condition(ident)
    said = Counter(r.predicted for r in results)
    answers = ", ".join(f"{label} {n}" for label, n in said.most_common())
    n = len(results)
    if cond.held_out:
        return f"| {ident} | held out | {said[HEALTHY]}/{n} | {said[OTHER_FAULT]}/{n} | {answers} |"
    return f"| {ident} | {said[cond.label]}/{n} | | | {answers} |"


def measure(diagnoser: str, task_name: str, seeds: int, store: Store, workers: int) -> list[str]:
    """The table's lines for one task."""
    task = get_task(task_name)
    conditions, skipped = variant_conditions(task)
    engine = LocalEngine(workers)
    try:
        report = evaluate(
            diagnoser, task, seeds=seeds, conditions=conditions, store=store, engine=engine
        )
    finally:
        engine.close()
    by_condition: dict[str, list[RunResult]] = {}
    for result in report.results:
        by_condition.setdefault(result.condition, []).append(result)
    lines = [
        f"{diagnoser} on {task_name}, {seeds} seeds, canonical severities",
        "",
        "| variant | recall | called healthy | called other_fault | answers |",
        "|---|---|---|---|---|",
    ]
    lines += [_row(c.name, by_condition[c.name]) for c in conditions]
    held = [r for c in conditions if c.held_out for r in by_condition[c.name]]
    healthy = sum(r.predicted == HEALTHY for r in held)
    lines += ["", f"held-out-fault runs called healthy: {healthy}/{len(held)}"]
    lines += [f"not run on {task_name}: {ident} ({why})" for ident, why in skipped.items()]
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--diagnoser", default="rules")
    parser.add_argument("--tasks", default="digits,synthetic")
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--store", default=None, help="record directory (default: the usual)")
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    # Diagnoses run here, in this process: on one thread, as in a worker. Two threads
    # on a busy 2-core host made one rules diagnosis 30x slower, past its time limit.
    torch.set_num_threads(1)
    store = Store(args.store) if args.store else Store()
    for task in args.tasks.split(","):
        print("\n".join(measure(args.diagnoser, task, args.seeds, store, args.workers)))
        print()


if __name__ == "__main__":
    main()
