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

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from faultbench.faults.recipe import Recipe
from faultbench.training.instruments import Instrument, finish_all
from faultbench.training.model import build_model
from faultbench.training.monitor import SAMPLINGS, Monitor
from faultbench.training.trace import RunConfig, Trace

# Evaluations per run, evenly spaced (every 60 steps of the default 600, about
# 1.3 epochs of digits). The diagnosers read the last one (doctor's check also
# the first); the others draw the accuracy curves. Twenty cost about 2% more
# time per step than ten (faultbench bench, figure 1), which the recording-
# overhead goal cannot spare.
EVALUATIONS = 10
TRAIN_EVAL_SAMPLE = 512  # training examples scored at each evaluation
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

    The same recipe trains to the same numbers on any machine with the same
    torch: one thread, deterministic algorithms, and every random draw
    (initialization, batch order, dropout, a fault's own) seeded from
    ``recipe.seed``. ``evaluate`` (default: as ``record``) runs the periodic
    evaluations even without a monitor, which lets the benchmark price them apart.
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
            monitor = Monitor(model, optimizer, every=every, also_every=_samplings(every))
        stream = recipe.loader(recipe)
        batches = monitor.batches(stream) if monitor else stream
        loss_fn, clear, clip, update = recipe.loss, recipe.clear, recipe.clip, recipe.update
        eval_every = max(1, recipe.steps // EVALUATIONS)
        state = [*model.parameters(), *model.buffers()]  # what an evaluation depends on
        snapshots: list[tuple[int, list[torch.Tensor]]] = []
        for instrument in instruments:
            instrument.start(model, optimizer, loss_fn)
        for step in range(1, recipe.steps + 1):
            xb, yb = next(batches)
            output = model(xb)
            loss = loss_fn(output, yb)
            clear(model, optimizer, step)
            loss.backward()
            for instrument in instruments:
                instrument.after_backward(model, optimizer, (xb, yb), output, loss, step)
            clip(model, optimizer, step)
            update(model, optimizer, step)
            schedule.step()
            if monitor is not None:
                monitor.step(loss)
            for instrument in instruments:
                instrument.after_step(model, optimizer, (xb, yb), loss, step)
            if evaluate and (step % eval_every == 0 or step == recipe.steps):
                snapshots.append((step, [t.detach().clone() for t in state]))
        _evaluate_snapshots(model, state, snapshots, _Scorer(recipe), monitor)
        seen = finish_all(instruments)
        if monitor is None:
            return TrainResult(None, None, time.perf_counter() - start, seen)
        monitor.close()
        return TrainResult(monitor.trace(), monitor.config(), time.perf_counter() - start, seen)


def _samplings(every: int) -> tuple[int, ...]:
    """The sparser samplings a trace recorded every ``every`` steps can also be read at."""
    return tuple(k for k in SAMPLINGS if k % every == 0 and k != every)


@contextlib.contextmanager
def _reproducible() -> Iterator[None]:
    """One thread and deterministic algorithms while a run trains; the caller's after."""
    threads = torch.get_num_threads()
    strict = torch.are_deterministic_algorithms_enabled()
    warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    torch.set_num_threads(THREADS)
    torch.use_deterministic_algorithms(True)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(strict, warn_only=warn_only)
        torch.set_num_threads(threads)


def _evaluate_snapshots(
    model: nn.Module,
    state: list[torch.Tensor],
    snapshots: list[tuple[int, list[torch.Tensor]]],
    scorer: _Scorer,
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


class _Scorer:
    """The evaluation, with its data prepared once instead of at every call.

    The training sample and the validation set go through the model in one
    forward pass: the benchmark's model is small, so the fixed cost of each
    call is a large part of the evaluation's cost.
    """

    def __init__(self, recipe: Recipe) -> None:
        n = min(TRAIN_EVAL_SAMPLE, len(recipe.y_train))
        self.n_train, self.n_val = n, len(recipe.y_val)
        self.X = torch.from_numpy(np.concatenate([recipe.X_train[:n], recipe.X_val]))
        self.y = np.concatenate([recipe.y_train[:n], recipe.y_val])
        self.y_val = torch.from_numpy(self.y[n:])

    @torch.inference_mode()
    def __call__(self, model: nn.Module) -> dict[str, float]:
        """Score ``model`` as it is (put it in eval mode first)."""
        logits = model(self.X)
        # numpy's argmax: the same indices as torch's (first maximum, NaN
        # first), at a third of the cost on a few hundred rows of ten classes.
        hits = logits.numpy().argmax(axis=1) == self.y
        n = self.n_train
        return {
            "train_acc": int(np.count_nonzero(hits[:n])) / n,
            "val_acc": int(np.count_nonzero(hits[n:])) / self.n_val if self.n_val else float("nan"),
            # Classes along dim 1 of a (1, classes, examples) view: the same
            # loss (to the last bit, nearly always), but torch's CPU log-softmax is
            # several times faster over a strided dim than over a short last one.
            "val_loss": float(F.cross_entropy(logits.t()[None, :, n:], self.y_val[None])),
        }
