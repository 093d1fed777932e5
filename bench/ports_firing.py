"""Score the published diagnosers' ports once and count which of their rules ever fire.

    .venv/bin/python bench/ports_firing.py --store DIR [--tasks ...] [--grids classic full]

For each port and task: correct/total on each grid (the classic one: every canonical
condition; the full one: every variant, level and held-out fault; 5 seeds; runs missing
from the store are trained), the answers per condition, and for
every rule the port declares (``RULES``) the number of runs on which it fired
(``evidence["fired"]``); the rules that fired on no run are listed last. The ports use
their published defaults: nothing here feeds back into them.
"""

from __future__ import annotations

import argparse
import importlib
from collections import Counter

from faultbench.scoring.evaluate import Report, evaluate

PORTS = {
    "autotrainer": "faultbench.diagnosers.autotrainer",
    "deepdiagnosis": "faultbench.diagnosers.deepdiagnosis",
    "umlaut": "faultbench.diagnosers.umlaut",
    "thedeepchecker": "faultbench.diagnosers.thedeepchecker",
}


def fired_counts(reports: list[Report]) -> Counter[str]:
    """Runs on which each rule fired, over every report."""
    counts: Counter[str] = Counter()
    for report in reports:
        for result in report.results:
            counts.update(set(result.evidence.get("fired", [])))
    return counts


def answers(report: Report) -> dict[str, Counter[str]]:
    """Per condition: how often each label was answered."""
    out: dict[str, Counter[str]] = {}
    for r in report.results:
        out.setdefault(r.condition, Counter())[r.predicted] += 1
    return out


def main() -> None:
    """Score every port on every task and print the counts."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", required=True, help="record store shared by the runs")
    parser.add_argument("--tasks", nargs="+", default=["digits", "synthetic", "shapes", "language"])
    parser.add_argument(
        "--grids", nargs="+", default=["classic", "full"], choices=["classic", "full"]
    )
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--ports", nargs="+", default=list(PORTS), choices=list(PORTS))
    args = parser.parse_args()
    for name in args.ports:
        module = PORTS[name]
        rules = importlib.import_module(module).RULES
        reports = [
            evaluate(name, t, seeds=args.seeds, grid=grid, store=args.store)
            for grid in args.grids
            for t in args.tasks
        ]
        print(f"== {name}")
        for report in reports:
            score = f"{report.correct}/{report.total}"
            where = f"{report.task} ({report.grid})"
            print(f"{where}: {score} correct; failures: {report.failures or 'none'}")
            for condition, labels in answers(report).items():
                print(f"    {condition:<20} {dict(labels.most_common())}")
        counts = fired_counts(reports)
        print("fired on runs: " + ", ".join(f"{r}: {counts[r]}" for r in rules if counts[r]))
        never = [r for r in rules if not counts[r]]
        print(f"never fired ({len(never)} of {len(rules)}): {', '.join(never)}")
        print()


if __name__ == "__main__":
    main()
