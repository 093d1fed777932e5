"""The benchmark's model recipe and its batch stream."""

from __future__ import annotations

import time
from collections.abc import Iterator

import numpy as np
import torch
from torch import nn

from faultbench.faults.fault import RunSetup
from faultbench.training.architectures import body

DEAD_MARGIN = 1.0  # how far below the largest training pre-activation a dead bias sits


def build_model(setup: RunSetup) -> nn.Sequential:
    """The task's model (see ``training.architectures``), initialized from ``setup.seed``.

    Building twice from the same setup gives the same weights, which is what
    lets a probe rebuild the run's model without storing it.
    """
    torch.manual_seed(setup.seed)
    layers = body(
        setup.architecture,
        n_features=setup.X_train.shape[1],
        n_classes=setup.n_classes,
        hidden=setup.hidden,
        image_side=setup.image_side,
    )
    if setup.softmax_head:
        layers["softmax"] = nn.Softmax(dim=1)
    model = nn.Sequential(layers)
    if setup.dead_fraction > 0:
        _kill_units(model, setup)
    return model


def _kill_units(model: nn.Sequential, setup: RunSetup) -> None:
    # A bias below every training pre-activation makes the unit output 0 on all
    # data, so it passes no gradient and can never come back.
    layer: nn.Linear = model.hidden  # type: ignore[assignment]
    n_dead = max(1, round(setup.dead_fraction * layer.out_features))
    seen: list[torch.Tensor] = []
    hook = layer.register_forward_hook(lambda _m, _i, out: seen.append(out.detach()))
    with torch.no_grad():
        model(torch.from_numpy(setup.X_train))
        hook.remove()
        highest = seen[0][:, :n_dead].max(dim=0).values  # bias included
        layer.bias[:n_dead] -= highest + DEAD_MARGIN


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
