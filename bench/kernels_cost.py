"""What the pinned CPU kernels cost: a healthy run's time pinned over the processor's own.

Each round starts two fresh processes per task, one pinned (``faultbench.core.kernels``:
the variables set before torch runs, oneDNN and NNPACK off in the loop) and one with
the kernels torch picks for this processor (the variables removed, oneDNN and NNPACK
on, as before the pin), in alternating order. Each process trains the task's healthy
run (seed 0, ``loop.train``, one thread) ``--runs`` times and keeps the median thread
CPU time of all but the first (imports and first calls). The figure is the median over rounds of the
pinned / native ratio, with the range of the rounds; the last losses show that the two
kernels train to other bits.

    python bench/kernels_cost.py [--tasks digits shapes] [--rounds 6] [--runs 4]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import time

from faultbench.core import kernels


def _child(task: str, runs: int, native: bool) -> None:
    """Train ``runs`` times in this process; print the seconds and the last loss."""
    if native:
        kernels.backends = contextlib.nullcontext  # type: ignore[assignment]
    from faultbench.faults.recipe import base_setup
    from faultbench.tasks.task import get_task
    from faultbench.training.loop import train

    setup = base_setup(get_task(task), 0)
    times = []
    for _ in range(runs):
        start = time.thread_time()  # CPU time: what another process's load leaves alone
        trace = train(setup).trace
        times.append(time.thread_time() - start)
    assert trace is not None
    seconds, last = statistics.median(times[1:]), float(trace.loss[-1])
    print(json.dumps({"kernels": kernels.capability(), "seconds": seconds, "last_loss": last}))


def _run(task: str, runs: int, native: bool) -> dict[str, float | str]:
    env = {k: v for k, v in os.environ.items() if k not in kernels.ENVIRONMENT}
    if not native:
        env.update(kernels.ENVIRONMENT)
    argv = [sys.executable, __file__, "--child", task, "--runs", str(runs)]
    shown = subprocess.run(
        [*argv, *(["--native"] if native else [])], env=env, capture_output=True, text=True
    )
    if shown.returncode:
        raise SystemExit(shown.stderr)
    return json.loads(shown.stdout.splitlines()[-1])  # type: ignore[no-any-return]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", nargs="+", default=["digits", "shapes"])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--runs", type=int, default=4)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--native", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _child(args.child, args.runs, args.native)
        return
    for task in args.tasks:
        ratios, found = [], {}
        for i in range(args.rounds):
            order = (False, True) if i % 2 else (True, False)
            got = {native: _run(task, args.runs, native) for native in order}
            ratios.append(float(got[False]["seconds"]) / float(got[True]["seconds"]))
            found = got
        native, pinned = found[True], found[False]
        print(
            f"{task}: pinned / native {statistics.median(ratios):.3f}x "
            f"(rounds {min(ratios):.3f}-{max(ratios):.3f}, {args.rounds} rounds); last loss "
            f"native {native['kernels']} {native['last_loss']:.9g}, "
            f"pinned {pinned['kernels']} {pinned['last_loss']:.9g}"
        )


if __name__ == "__main__":
    main()
