"""What a diagnoser is handed: a run's trace, its configuration and a probe.

The injected condition is deliberately absent from everything here. A
``Run`` is built from a stored record by copying out the trace and the
configuration only, and the probe is rebuilt from the recipe's *results*
(initialized model, its loss, training arrays), never from the fault's parameters.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from faultbench.core.errors import FaultbenchError
from faultbench.faults.recipe import Recipe
from faultbench.training.model import build_model
from faultbench.training.monitor import IGNORE_INDEX
from faultbench.training.trace import RunConfig, Trace


def accuracy(output: torch.Tensor, target: torch.Tensor) -> float:
    """Share of counted targets the output's argmax gets right: a class per row of a
    classifier's ``(N, C)`` output, or a token per counted position of a sequence model's
    ``(N, T, V)`` output (targets equal to -100, the ignore index, do not count)."""
    hits = output.detach().argmax(dim=-1) == target
    counted = target != IGNORE_INDEX
    if bool(counted.all()):
        return float(hits.float().mean())
    return float(hits[counted].float().mean()) if bool(counted.any()) else float("nan")


class Probe:
    """The means to retrain a run's model on its data, outside its loop.

    It offers the model as the run initialized it, the run's loss and its
    training data; not its optimizer, learning rate or loader. Every call to
    :meth:`loss` counts as one probe step, so a diagnosis's cost is measured
    rather than declared.
    """

    def __init__(
        self,
        model: nn.Module | Callable[[], nn.Module],
        X: torch.Tensor,
        y: torch.Tensor,
        loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None = None,
        key: str = "",
    ) -> None:
        self._model = model
        self._X = X
        self._y = y
        self._loss_fn = loss_fn or F.cross_entropy
        self.steps_used = 0
        # The stored run this probe rebuilds (its store key, an opaque hash), so that what a
        # deterministic probe found can be reused by the next diagnosis of the same run;
        # "" for a user's probe, which nothing may be reused for.
        self.key = key

    @classmethod
    def from_setup(cls, recipe: Recipe, key: str = "") -> Probe:
        """Build the probe of a run from its (possibly faulty) recipe: its model as
        initialized, its loss and its training data, whatever a fault did to them;
        ``key`` is the stored run's key ("" for none)."""
        return cls(
            build_model(recipe),
            torch.from_numpy(recipe.X_train),
            torch.from_numpy(recipe.y_train),
            recipe.loss,
            key,
        )

    @classmethod
    def from_user(
        cls,
        make_model: Callable[[], nn.Module],
        loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
        X: torch.Tensor,
        y: torch.Tensor,
    ) -> Probe:
        """Build the probe of a user's run from their own pieces.

        Args:
            make_model: Builds the model as the user's script does, before any
                training (a factory, because the monitored model has moved on).
            loss_fn: The loss the script trains with, ``loss_fn(output, target)``.
            X: A few training examples, exactly as the loop feeds them (a bug in
                the inputs must reach the probe too).
            y: Their targets.

        Raises:
            FaultbenchError: ``make_model`` is not callable, or X and y differ in length.
        """
        if not callable(make_model) or isinstance(make_model, nn.Module):
            raise FaultbenchError(
                f"make_model must be a function that builds a fresh model; got "
                f"{type(make_model).__name__}"
            )
        if len(X) != len(y):
            raise FaultbenchError(
                f"X has {len(X)} examples but y has {len(y)}; expected equal lengths"
            )
        return cls(make_model, torch.as_tensor(X), torch.as_tensor(y), loss_fn)

    def make_model(self) -> nn.Module:
        """A fresh copy of the model as the run initialized it."""
        if isinstance(self._model, nn.Module):
            return copy.deepcopy(self._model)
        return self._model()

    def loss(self, output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """The run's loss on a model output; counts one probe step."""
        self.steps_used += 1
        return self._loss_fn(output, target)

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
    # What each instrument the diagnoser declared saw in the loop as it trained, by the
    # instrument's name (its ``finish()`` record); empty for a diagnoser without one.
    instruments: Mapping[str, dict[str, Any]] = field(default_factory=dict)

    def __repr__(self) -> str:
        return f"Run(task={self.task!r}, seed={self.seed}, steps={self.trace.steps})"
