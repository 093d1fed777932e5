"""Where the instrumented loop's extra time goes, in one run on one machine.

Interleaves, round after round, the same 600-step run trained four ways and
prints each one's time per step over the bare loop's (thread CPU time, median
of the per-round ratios):

- bare: no monitor, no evaluations (the denominator of ``faultbench bench``);
- evaluations: the periodic evaluations only;
- statistics: only the monitor's per-step statistics of weights and
  gradients (the compiled kernel, or the numpy path's copy and chunked
  reduction where it was not built), i.e. their floor;
- instrumented: the benchmark's loop as it runs (``loop.train``).

    python bench/overhead_parts.py [--task digits] [--rounds 12]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F

from faultbench.faults.recipe import BatchStream, Recipe, base_setup
from faultbench.tasks.task import get_task
from faultbench.training.loop import train
from faultbench.training.model import build_model
from faultbench.training.monitor import pack_layers, step_stats


def statistics_only(setup: Recipe) -> None:
    """The bare loop plus the monitor's per-step statistics, nothing else."""
    model = build_model(setup)
    pack_layers(model)
    optimizer = torch.optim.Adam(model.parameters(), lr=setup.lr)
    layers = [list(m.parameters()) for m in model.modules() if isinstance(m, torch.nn.Linear)]
    flat = [p for ps in layers for p in ps]
    work = step_stats(layers)
    stream = iter(BatchStream(setup.X_train, setup.y_train, batch_size=setup.batch_size, seed=0))
    for _ in range(setup.steps):
        xb, yb = next(stream)
        loss = F.cross_entropy(model(xb), yb)
        model.zero_grad(set_to_none=False)
        loss.backward()
        optimizer.step()
        if work.record(flat):
            work.reduce()
    work.reduce()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", default="digits")
    parser.add_argument("--rounds", type=int, default=12)
    args = parser.parse_args()
    torch.set_num_threads(1)  # as in a worker
    setup = base_setup(get_task(args.task), 0)
    ways: dict[str, Callable[[], object]] = {
        "bare": lambda: train(setup, record=False),
        "evaluations": lambda: train(setup, record=False, evaluate=True),
        "statistics": lambda: statistics_only(setup),
        "instrumented": lambda: train(setup),
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
