"""The memorization probe: can the run's model learn 16 of its own examples?

(For a sequence model: 16 sequences, every counted token of them.)

Any working model and loss drive a handful of examples to zero error at some
sane learning rate. If one of three sane rates succeeds, the model, the data
and the loss are able to learn, and a run that failed was failed by its loop
(its rate, its gradients); if none does, the model or the loss is broken.
Every loss goes through ``probe.loss`` so the harness counts the cost.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from faultbench.scoring.run import Probe
from faultbench.training.monitor import IGNORE_INDEX

EXAMPLES = 16  # few enough that any working model memorizes them
RATES = (1e-2, 1e-3, 1e-4)  # sane Adam rates; the fastest first, since most runs stop there
MAX_STEPS = 150  # per rate; full-batch Adam memorizes 16 examples well before this
TARGET = 0.1  # memorized: every example right and loss below TARGET * ln C


@dataclass(frozen=True)
class Memorization:
    """What the probe found."""

    memorized: bool  # whether some rate memorized the examples
    rate: float | None  # the first rate that did, None if none
    steps: int  # probe steps spent in all
    best_loss: float  # lowest full-batch loss seen at any rate


#: What the probe found per stored run (its key) and class count, in this process: the probe
#: is deterministic, and rules and the doctor ask it about the same run at each sampling.
_FOUND: dict[tuple[str, int], Memorization] = {}
REMEMBERED = 4096  # runs remembered at most (a report's task has a few hundred)


def memorize(probe: Probe, n_classes: int) -> Memorization:
    """Try each rate in :data:`RATES`, stopping at the first that memorizes.

    A stored run's probe (one with a key) is asked once per process: a second diagnosis
    of the run gets the same answer, and is charged the same probe steps, since that is
    what the diagnosis costs wherever it runs first.
    """
    if not probe.key:
        return _memorize(probe, n_classes)
    key = (probe.key, n_classes)
    if key not in _FOUND:
        if len(_FOUND) >= REMEMBERED:
            _FOUND.clear()
        _FOUND[key] = _memorize(probe, n_classes)
    else:
        probe.steps_used += _FOUND[key].steps
    return _FOUND[key]


def _memorize(probe: Probe, n_classes: int) -> Memorization:
    X, y = probe.train_data(EXAMPLES)
    target = TARGET * math.log(max(2, n_classes))
    spent, best = 0, math.inf
    for rate in RATES:
        steps, done, loss = _try_rate(probe, X, y, rate, target)
        spent, best = spent + steps, min(best, loss)
        if done:
            return Memorization(True, rate, spent, best)
    return Memorization(False, None, spent, best)


def _try_rate(
    probe: Probe, X: torch.Tensor, y: torch.Tensor, rate: float, target: float
) -> tuple[int, bool, float]:
    """Full-batch Adam at ``rate``; returns (steps, memorized, lowest loss)."""
    torch.manual_seed(0)  # the probe is deterministic whatever ran before it
    model = probe.make_model()
    model.train()
    optimizer = torch.optim.Adam(model.parameters(), lr=rate)
    best = math.inf
    for step in range(1, MAX_STEPS + 1):
        out = model(X)
        loss = probe.loss(out, y)
        value = float(loss.detach())
        if not math.isfinite(value):
            return step, False, best
        best = min(best, value)
        if value < target and _all_right(out, y):
            return step, True, value
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return MAX_STEPS, False, best


def _all_right(out: torch.Tensor, y: torch.Tensor) -> bool:
    """Every counted target predicted: a class per row, or a token per counted position of a
    sequence model's ``(N, T, V)`` output (labels of -100 do not count)."""
    return bool(((out.argmax(dim=-1) == y) | (y == IGNORE_INDEX)).all())
