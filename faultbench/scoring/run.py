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
from faultbench.faults.recipe import Recipe, call, inputs_of, rows
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

    The inputs are whatever the model takes, as a loader yields them: a tensor, a
    tuple of tensors (``model(*inputs)``) or a dict (``model(**inputs)``), each with
    one row per example; :meth:`forward` calls the model on them and returns its
    output tensor (a Hugging Face ``ModelOutput``'s logits).
    """

    def __init__(
        self,
        model: nn.Module | Callable[[], nn.Module],
        X: Any,
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
            inputs_of(recipe, recipe.X_train, recipe.codes_train),
            torch.from_numpy(recipe.y_train),
            recipe.loss,
            key,
        )

    @classmethod
    def from_user(
        cls,
        make_model: Callable[[], nn.Module],
        loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
        X: Any,
        y: torch.Tensor,
    ) -> Probe:
        """Build the probe of a user's run from their own pieces.

        Args:
            make_model: Builds the model as the user's script does, before any
                training (a factory, because the monitored model has moved on).
            loss_fn: The loss the script trains with, ``loss_fn(output, target)``.
            X: A few training examples' inputs, exactly as the loop feeds them (a bug
                in the inputs must reach the probe too): a tensor, a tuple of tensors
                for a model of several inputs (``model(*X)``), or a dict of them
                (``model(**X)``), each with one row per example.
            y: Their targets.

        Raises:
            FaultbenchError: ``make_model`` is not callable, X holds no tensor, or an
                input and y differ in length.
        """
        if not callable(make_model) or isinstance(make_model, nn.Module):
            raise FaultbenchError(
                f"make_model must be a function that builds a fresh model; got "
                f"{type(make_model).__name__}"
            )
        inputs = _as_tensors(X)
        target = torch.as_tensor(y)
        for where, tensor in _named_tensors(inputs):
            if tensor.dim() == 0 or len(tensor) != len(target):
                rows = len(tensor) if tensor.dim() else "no"
                raise FaultbenchError(
                    f"{where} has {rows} examples but y has {len(target)}; expected one row "
                    "per example in every input"
                )
        return cls(make_model, inputs, target, loss_fn)

    def make_model(self) -> nn.Module:
        """A fresh copy of the model as the run initialized it."""
        if isinstance(self._model, nn.Module):
            return copy.deepcopy(self._model)
        return self._model()

    def forward(self, model: nn.Module, inputs: Any) -> torch.Tensor:
        """``model``'s output tensor on ``inputs`` (as :meth:`train_data` gives them)."""
        return output_tensor(call(model, inputs))

    def loss(self, output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """The run's loss on a model output; counts one probe step."""
        self.steps_used += 1
        return self._loss_fn(output, target)

    def train_data(self, n: int | None = None) -> tuple[Any, torch.Tensor]:
        """The first ``n`` training examples (all when ``n`` is None), as the run saw them:
        their inputs (the structure the model takes) and targets."""
        stop = len(self._y) if n is None else n
        return rows(self._X, slice(0, stop)), self._y[:stop]

    @property
    def examples(self) -> int:
        """How many training examples the probe holds."""
        return len(self._y)

    def __repr__(self) -> str:
        return f"Probe(train_examples={len(self._y)}, steps_used={self.steps_used})"


def output_tensor(output: Any) -> torch.Tensor:
    """A model's output as one tensor: itself, a ``ModelOutput``'s (or dict's) ``logits``,
    or the first tensor of a tuple."""
    if isinstance(output, torch.Tensor):
        return output
    logits = output.get("logits") if isinstance(output, Mapping) else None
    if isinstance(logits, torch.Tensor):
        return logits
    if isinstance(output, (tuple, list)) and output and isinstance(output[0], torch.Tensor):
        return output[0]
    raise FaultbenchError(
        f"the model returned {type(output).__name__}; expected a tensor, a tuple starting with "
        "one, or a mapping with 'logits'"
    )


def _as_tensors(X: Any) -> Any:
    if isinstance(X, (tuple, list)):
        return tuple(_as_tensors(x) for x in X)
    if isinstance(X, Mapping):
        return {k: _as_tensors(v) for k, v in X.items()}
    try:
        return torch.as_tensor(X)
    except (TypeError, ValueError, RuntimeError) as exc:
        raise FaultbenchError(
            f"X must be a tensor, a tuple or a dict of tensors; got {type(X).__name__} ({exc})"
        ) from None


def _named_tensors(inputs: Any, where: str = "X") -> list[tuple[str, torch.Tensor]]:
    if isinstance(inputs, tuple):
        return [pair for i, x in enumerate(inputs) for pair in _named_tensors(x, f"{where}[{i}]")]
    if isinstance(inputs, dict):
        return [pair for k, x in inputs.items() for pair in _named_tensors(x, f"{where}[{k!r}]")]
    return [(where, inputs)]


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
