"""The memorization probe: can the run's model learn 16 of its own examples?

One procedure for every reader: ``rules`` asks it before naming a fault that lives in the
model or its loss, and the doctor's soundness check reads the same answer
(:mod:`faultbench.scoring.soundness`), whose :attr:`Memorization.ratio` is the statistic
its false-alarm budget calibrates (:mod:`faultbench.scoring.budget`).

(For a sequence model: 16 sequences, every counted token of them.)

Any working model and loss drive a handful of examples to near-zero loss at some
sane learning rate. If one of three sane rates succeeds, the model, the data
and the loss are able to learn, and a run that failed was failed by its loop
(its rate, its gradients); if none does, the model or the loss is broken.
Memorized means the loss fell to :data:`MEMORIZED` of where it started on those
examples, the same for every kind of task (a class, a label set, a value): an
argmax hit means nothing to a regression. Every loss goes through ``probe.loss``
so the harness counts the cost.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch

from faultbench.scoring.run import Probe

EXAMPLES = 16  # few enough that any working model memorizes them
RATES = (1e-2, 1e-3, 1e-4)  # sane Adam rates; the fastest first, since most runs stop there
MAX_STEPS = 150  # per rate; full-batch Adam memorizes 16 examples well before this
# Memorized: the loss on the examples fell to this share of its first value. A classifier's
# untrained loss is near ln C and every example is right well before 0.1 ln C; a loss handed
# probabilities cannot get there (its floor, ln(1 + (C - 1) / e), is 0.45 ln 2 and more).
MEMORIZED = 0.1


@dataclass(frozen=True)
class Memorization:
    """What the probe found."""

    memorized: bool  # whether some rate memorized the examples
    rate: float | None  # the first rate that did, None if none
    steps: int  # probe steps spent in all
    best_loss: float  # lowest full-batch loss seen at any rate
    ratio: float = math.nan  # the lowest loss over its rate's first loss, at any rate tried


#: What the probe found per stored run (its key), in this process: the probe is
#: deterministic, and rules and the doctor ask it about the same run at each sampling.
_FOUND: dict[str, Memorization] = {}
REMEMBERED = 4096  # runs remembered at most (a report's task has a few hundred)


def memorize(probe: Probe) -> Memorization:
    """Try each rate in :data:`RATES`, stopping at the first that memorizes.

    A stored run's probe (one with a key) is asked once per process: a second diagnosis
    of the run gets the same answer, and is charged the same probe steps, since that is
    what the diagnosis costs wherever it runs first.
    """
    if not probe.key:
        return _memorize(probe)
    key = probe.key
    if key not in _FOUND:
        if len(_FOUND) >= REMEMBERED:
            _FOUND.clear()
        _FOUND[key] = _memorize(probe)
    else:
        probe.steps_used += _FOUND[key].steps
    return _FOUND[key]


def _memorize(probe: Probe) -> Memorization:
    X, y = probe.train_data(EXAMPLES)
    spent, best, ratio = 0, math.inf, math.inf
    for rate in RATES:
        steps, done, loss, start = _try_rate(probe, X, y, rate)
        spent, best = spent + steps, min(best, loss)
        if math.isfinite(start) and start > 0 and math.isfinite(loss):
            ratio = min(ratio, loss / start)
        if done:
            return Memorization(True, rate, spent, best, ratio)
    return Memorization(False, None, spent, best, ratio)


def _try_rate(probe: Probe, X: Any, y: torch.Tensor, rate: float) -> tuple[int, bool, float, float]:
    """Full-batch Adam at ``rate``; returns (steps, memorized, lowest loss, first loss)."""
    torch.manual_seed(0)  # the probe is deterministic whatever ran before it
    model = probe.make_model()
    model.train()
    optimizer = torch.optim.Adam(model.parameters(), lr=rate)
    best, start = math.inf, math.nan
    for step in range(1, MAX_STEPS + 1):
        loss = probe.loss(probe.forward(model, X), y)
        value = float(loss.detach())
        if not math.isfinite(value):
            return step, False, best, start
        start = value if step == 1 else start
        best = min(best, value)
        if value <= MEMORIZED * start:
            return step, True, value, start
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return MAX_STEPS, False, best, start
