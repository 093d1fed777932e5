"""What a diagnoser is handed: a run's trace, its configuration and a probe.

The injected condition is deliberately absent from everything here. A
``Run`` is built from a stored record by copying out the trace and the
configuration only, and the probe is rebuilt from the setup's *results*
(initialized model, training arrays), never from the fault's parameters.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from faultbench.faults import RunSetup
from faultbench.model import build_model
from faultbench.trace import RunConfig, Trace


class Probe:
    """The means to retrain a run's model on its data, outside its loop.

    It offers the model as the run initialized it, the run's loss and its
    training data; not its optimizer, learning rate or loader. Every call to
    :meth:`loss` counts as one probe step, so a diagnosis's cost is measured
    rather than declared.
    """

    def __init__(self, model: nn.Module, X: torch.Tensor, y: torch.Tensor) -> None:
        self._model = model
        self._X = X
        self._y = y
        self.steps_used = 0

    @classmethod
    def from_setup(cls, setup: RunSetup) -> Probe:
        """Build the probe of a run from its (possibly faulty) setup."""
        return cls(
            build_model(setup), torch.from_numpy(setup.X_train), torch.from_numpy(setup.y_train)
        )

    def make_model(self) -> nn.Module:
        """A fresh copy of the model as the run initialized it."""
        return copy.deepcopy(self._model)

    def loss(self, output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """The run's loss on a model output; counts one probe step."""
        self.steps_used += 1
        return F.cross_entropy(output, target)

    def train_data(self, n: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """The first ``n`` training examples (all when ``n`` is None), as the run saw them."""
        stop = len(self._y) if n is None else n
        return self._X[:stop], self._y[:stop]

    def __repr__(self) -> str:
        return f"Probe(train_examples={len(self._y)}, steps_used={self.steps_used})"


@dataclass(frozen=True, eq=False)
class Run:
    """One finished training run, as a diagnoser sees it."""

    task: str  # the task's name (a practitioner knows their task)
    seed: int  # the run's seed, for diagnosers that randomize
    trace: Trace  # everything the loop recorded
    config: RunConfig  # what is observable without running anything
    probe: Probe | None = None  # None when the run cannot be rebuilt (a user's loop)

    def __repr__(self) -> str:
        return f"Run(task={self.task!r}, seed={self.seed}, steps={self.trace.steps})"
