"""``faultbench run --task realbugs`` and the suite's lines in ``faultbench list``.

A helper module (it defines no ``NAME``), so the real-bug suite needs no verb of its
own and is no :class:`~faultbench.tasks.task.Task`: ``run`` routes the suite's name here
before it looks up a task.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter

from faultbench.core.errors import FaultbenchError

SUITE = "realbugs"  # faultbench.realbugs.SUITE, spelled here so `--help` loads no torch


def names(text: str) -> list[str]:
    """argparse type: comma-separated case names."""
    return [name.strip() for name in text.split(",") if name.strip()]


def check_arguments(args: argparse.Namespace) -> None:
    """Refuse the grid's selections, which the suite does not have.

    Raises:
        FaultbenchError: --grid, --faults, --variants or --levels given with the suite,
            or --cases given with another task.
    """
    if args.task != SUITE:
        if getattr(args, "cases", None):
            raise FaultbenchError(f"--cases selects real-bug cases; expected --task {SUITE}")
        return
    chosen = [f"--{name}" for name in ("faults", "variants", "levels") if getattr(args, name)]
    if args.grid != "full":
        chosen.insert(0, "--grid")
    if chosen:
        raise FaultbenchError(
            f"{', '.join(chosen)} select grid runs; the real-bug suite has none (one run per "
            f"case and form); expected --cases to choose cases"
        )


def main(args: argparse.Namespace) -> int:
    """Score the diagnoser on the suite and print the report."""
    from faultbench.cli.commands.common import store_from
    from faultbench.tools.realbugs import evaluate_realbugs

    check_arguments(args)
    store = store_from(args)
    report = evaluate_realbugs(
        args.diagnoser,
        case_names=args.cases,
        store=store,
        timeout=args.timeout,
        isolate=False if args.in_process else None,
    )
    for note in report.notes:
        print(f"faultbench: note: {note}", file=sys.stderr)
    if args.json:
        print(json.dumps(report.to_dict(), allow_nan=False, default=str))
    else:
        print(report)
    return 0


def list_section() -> None:
    """The suite's lines of ``faultbench list``: its cases per label, and what was dropped."""
    from faultbench.realbugs import DROPPED, all_cases, counts_by_label

    shipped = all_cases()
    print(f"real-bug suite ({SUITE}: faultbench run --task {SUITE}; a test set, never tuned on):")
    print(f"  {len(shipped)} cases re-enacted from public reports, each faulty and fixed")
    for label, count in counts_by_label().items():
        print(f"  {label:<22} {count} cases")
    for what, attr in (("models", "model"), ("optimizers", "optimizer")):
        counted = Counter(getattr(case, attr) for case in shipped)
        print(f"  {what}: " + ", ".join(f"{k} {n}" for k, n in sorted(counted.items())))
    print(f"  {len(DROPPED)} dropped (symptom did not reproduce, or source not eligible)")
