"""The benchmark's model recipe and its batch stream."""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Iterator

import numpy as np
import torch
from torch import nn

from faultbench.faults import RunSetup

DEAD_MARGIN = 1.0  # how far below the largest training pre-activation a dead bias sits


def build_model(setup: RunSetup) -> nn.Sequential:
    """An MLP with one ReLU hidden layer, initialized from ``setup.seed``.

    Building twice from the same setup gives the same weights, which is what
    lets a probe rebuild the run's model without storing it.
    """
    torch.manual_seed(setup.seed)
    layers: OrderedDict[str, nn.Module] = OrderedDict(
        hidden=nn.Linear(setup.X_train.shape[1], setup.hidden),
        relu=nn.ReLU(),
        output=nn.Linear(setup.hidden, setup.n_classes),
    )
    if setup.softmax_head:
        layers["softmax"] = nn.Softmax(dim=1)
    model = nn.Sequential(layers)
    if setup.dead_fraction > 0:
        _kill_units(model.hidden, setup)  # type: ignore[arg-type]
    return model


def _kill_units(layer: nn.Linear, setup: RunSetup) -> None:
    # A bias below every training pre-activation makes the unit output 0 on all
    # data, so it passes no gradient and can never come back.
    n_dead = max(1, int(round(setup.dead_fraction * layer.out_features)))
    with torch.no_grad():
        pre = torch.from_numpy(setup.X_train) @ layer.weight[:n_dead].T
        layer.bias[:n_dead] = -(pre.max(dim=0).values + DEAD_MARGIN)


class BatchStream:
    """Endless shuffled mini-batches, reshuffled every epoch from a seeded generator.

    ``delay`` simulates a slow pipeline (decoding, augmentation, a remote disk):
    the time is spent inside ``next()``, where a real loader would spend it.
    """

    def __init__(
        self, X: np.ndarray, y: np.ndarray, *, batch_size: int, seed: int, delay: float = 0.0
    ) -> None:
        self.X = torch.from_numpy(np.ascontiguousarray(X))
        self.y = torch.from_numpy(np.ascontiguousarray(y))
        self.batch_size = min(batch_size, len(y))
        self.delay = delay
        self._rng = np.random.Generator(np.random.PCG64(seed))

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        n = len(self.y)
        while True:
            order = torch.from_numpy(self._rng.permutation(n))
            for start in range(0, n - self.batch_size + 1, self.batch_size):
                if self.delay:
                    time.sleep(self.delay)
                idx = order[start : start + self.batch_size]
                yield self.X[idx], self.y[idx]
