"""Where the instrumented loop's extra time goes, in one run on one machine.

Interleaves, round after round, the same 600-step run trained four ways and
prints each one's time per step over the bare loop's (thread CPU time, median
of the per-round ratios):

- bare: no monitor, no evaluations (the denominator of ``faultbench bench``);
- evaluations: the periodic evaluations only;
- sparse: the benchmark's loop with a ``Monitor(every=100)``: loss, timings and
  batch bookkeeping every step, the per-layer and activation statistics on
  six steps only (the evaluations included);
- instrumented: the benchmark's loop as it runs (``loop.train``, every step).

    python bench/overhead_parts.py [--task digits] [--rounds 12]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch

from faultbench.faults.fault import base_setup
from faultbench.tasks.task import get_task
from faultbench.training import loop

SPARSE_EVERY = 100


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", default="digits")
    parser.add_argument("--rounds", type=int, default=12)
    args = parser.parse_args()
    torch.set_num_threads(1)  # as in a worker
    setup = base_setup(get_task(args.task), 0)

    ways: dict[str, Callable[[], object]] = {
        "bare": lambda: loop.train(setup, record=False),
        "evaluations": lambda: loop.train(setup, record=False, evaluate=True),
        "sparse": lambda: loop.train(setup, every=SPARSE_EVERY),
        "instrumented": lambda: loop.train(setup),
    }
    times: dict[str, list[float]] = {name: [] for name in ways}
    for run in ways.values():  # warm caches and lazy imports
        run()
    for _ in range(args.rounds):
        for name, run in ways.items():
            start = time.thread_time()
            run()
            times[name].append(time.thread_time() - start)
    print(f"{args.task}, {setup.steps} steps, median of {args.rounds} interleaved rounds")
    for name, seconds in times.items():
        ratio = statistics.median(a / b for a, b in zip(seconds, times["bare"]))
        print(f"  {name:14s} {ratio:.3f}x  ({statistics.median(seconds) * 1000:.0f} ms per run)")


if __name__ == "__main__":
    main()
