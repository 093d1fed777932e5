"""The one training loop every condition runs through: flat, and blind to faults.

It calls the parts of a recipe (:mod:`faultbench.faults.recipe`) in the order
a training script does; a fault changes a part, never this loop.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from faultbench.core import kernels
from faultbench.faults.recipe import Recipe, Scorer, call
from faultbench.training.instruments import Instrument, finish_all
from faultbench.training.model import build_model
from faultbench.training.monitor import Monitor
from faultbench.training.trace import RunConfig, Trace, prefix_steps

# Evaluations per run, evenly spaced (every 60 steps of the default 600, about
# 1.3 epochs of digits). The diagnosers read the last one (doctor's check also
# the first); the others draw the accuracy curves. Twenty cost about 2% more
# time per step than ten (faultbench bench, figure 1), which the recording-
# overhead goal cannot spare. What an evaluation scores is the recipe's
# (``make_scorer``: a classifier's accuracies, a sequence task's exact match).
EVALUATIONS = 10
THREADS = 1  # torch threads a run trains with: a sum's order, so its last bits, depend on it


@dataclass(frozen=True)
class TrainResult:
    """What one training run produced."""

    trace: Trace | None  # None when trained with ``record=False``
    config: RunConfig | None  # None when trained with ``record=False``
    seconds: float  # wall time of the loop, evaluations included
    instruments: dict[str, dict[str, Any]] = field(default_factory=dict)  # name -> its record


def train(
    recipe: Recipe,
    *,
    record: bool = True,
    evaluate: bool | None = None,
    every: int = 1,
    instruments: Sequence[Instrument] = (),
) -> TrainResult:
    """Train one run. ``record=False`` is the bare loop the benchmark compares against.

    The same recipe trains to the same numbers on any x86-64 machine with AVX2 and the
    same torch: one thread, deterministic algorithms, every random draw
    (initialization, batch order, dropout, a fault's own) seeded from
    ``recipe.seed``, and, in a process pinned before torch ran
    (:mod:`faultbench.core.kernels`), CPU kernels that do not depend on the
    processor. ``evaluate`` (default: as ``record``) runs the periodic evaluations
    even without a monitor, which lets the benchmark price them apart.
    ``every`` is the Monitor's: the benchmark records every step (1), so each
    diagnoser is scored on the whole of every series; ``faultbench bench`` also
    prices the Monitor's own default. ``instruments`` are called at the loop's moments
    (:mod:`faultbench.training.instruments`); none by default, and they never change
    the run's numbers.
    """
    evaluate = record if evaluate is None else evaluate
    with _reproducible():
        start = time.perf_counter()
        model = build_model(recipe)  # seeds torch's generator: dropout draws from it too
        optimizer = recipe.make_optimizer(recipe.param_groups(model, recipe), recipe)
        schedule = recipe.make_schedule(optimizer, recipe)
        monitor = None
        if record:
            monitor = Monitor(
                model,
                optimizer,
                every=every,
                kind=recipe.kind,
                targets=recipe.y_train,
                marks=prefix_steps(recipe.steps),  # so the trace reads as a shorter run's
            )
        stream = recipe.loader(recipe)
        batches = monitor.batches(stream) if monitor else stream
        loss_fn, clear, clip, update = recipe.loss, recipe.clear, recipe.clip, recipe.update
        # A sequence run also gives the Monitor its logits, labels and padding: the token
        # accuracy and what the loss counts, per step (a classifier's keeps the bare step).
        pad = recipe.sequences.pad if recipe.sequences is not None else None
        eval_every = max(1, recipe.steps // EVALUATIONS)
        state = [*model.parameters(), *model.buffers()]  # what an evaluation depends on
        snapshots: list[tuple[int, list[torch.Tensor]]] = []
        for instrument in instruments:
            instrument.start(model, optimizer, loss_fn)
        for step in range(1, recipe.steps + 1):
            xb, yb = next(batches)
            output = call(model, xb)
            loss = loss_fn(output, yb)
            clear(model, optimizer, step)
            loss.backward()
            for instrument in instruments:
                instrument.after_backward(model, optimizer, (xb, yb), output, loss, step)
            clip(model, optimizer, step)
            update(model, optimizer, step)
            schedule.step()
            if monitor is not None and pad is not None:
                monitor.step(loss, output, yb, mask=xb != pad)
            elif monitor is not None:
                monitor.step(loss)
            for instrument in instruments:
                instrument.after_step(model, optimizer, (xb, yb), loss, step)
            if evaluate and (step % eval_every == 0 or step == recipe.steps):
                snapshots.append((step, [t.detach().clone() for t in state]))
        _evaluate_snapshots(model, state, snapshots, recipe.make_scorer(recipe), monitor)
        seen = finish_all(instruments)
        if monitor is None:
            return TrainResult(None, None, time.perf_counter() - start, seen)
        monitor.close()
        return TrainResult(monitor.trace(), monitor.config(), time.perf_counter() - start, seen)


@contextlib.contextmanager
def _reproducible() -> Iterator[None]:
    """One thread, deterministic algorithms and no convolutions generated for this
    processor (:func:`faultbench.core.kernels.backends`) while a run trains; the
    caller's settings after."""
    threads = torch.get_num_threads()
    strict = torch.are_deterministic_algorithms_enabled()
    warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    torch.set_num_threads(THREADS)
    torch.use_deterministic_algorithms(True)
    try:
        with kernels.backends():
            yield
    finally:
        torch.use_deterministic_algorithms(strict, warn_only=warn_only)
        torch.set_num_threads(threads)


def _evaluate_snapshots(
    model: nn.Module,
    state: list[torch.Tensor],
    snapshots: list[tuple[int, list[torch.Tensor]]],
    scorer: Scorer,
    monitor: Monitor | None,
) -> None:
    """Score the weights saved during training, once training is over.

    The same numbers as evaluating at those steps (same weights, same data,
    same operations), but an evaluation in the middle of training pushes the
    training step's data and code out of the caches, so the steps after it
    run slower (on digits, for about as long again as the evaluation itself
    took). The last snapshot is the final weights, so the model ends as
    training left it.
    """
    if not snapshots:
        return
    model.eval()  # once for all of them
    with torch.inference_mode():
        for step, saved in snapshots:
            for tensor, value in zip(state, saved):
                tensor.copy_(value)
            scores = scorer(model)
            if monitor is not None:
                monitor.log_eval(**scores, step=step)
    model.train()
