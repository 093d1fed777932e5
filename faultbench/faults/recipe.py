"""The run recipe: a training script cut into the parts where bugs live.

A run is built from parts, each where a user's script has it::

    X_train, y_train, X_val, y_val        the data
    model = make_model(recipe)             the model (after the seed is set)
    groups = param_groups(model, recipe)   what the optimizer updates, with which settings
    optimizer = make_optimizer(groups, recipe)
    for xb, yb in loader(recipe):          the loader
        loss = loss_fn(model(xb), yb)      the loss
        clear(model, optimizer, step)      the step: gradients cleared,
        loss.backward()                    computed,
        clip(model, optimizer, step)       clipped
        update(model, optimizer, step)     and applied

:func:`base_setup` gives a task's healthy recipe. A fault returns a copy with
one or more parts wrapped or replaced (see :mod:`faultbench.faults.fault`), so
the loop that runs a recipe (``faultbench.training.loop``) never names a fault.
The loss also reaches diagnosers, through the probe: it stays a function of
module level (``F.cross_entropy``, ``F.nll_loss``), so that a probe pickles.
"""

from __future__ import annotations

import dataclasses
import zlib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from faultbench.faults.architectures import CNN_CHANNELS, body
from faultbench.tasks.task import Task

Batch = tuple[torch.Tensor, torch.Tensor]
ModelFactory = Callable[["Recipe"], nn.Module]
LossFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
GroupsFactory = Callable[[nn.Module, "Recipe"], list[dict[str, Any]]]
OptimizerFactory = Callable[[list[dict[str, Any]], "Recipe"], torch.optim.Optimizer]
LoaderFactory = Callable[["Recipe"], Iterator[Batch]]
StepPart = Callable[[nn.Module, torch.optim.Optimizer, int], None]


def standard_model(recipe: Recipe) -> nn.Module:
    """The task's model (see :mod:`faultbench.faults.architectures`) with one hidden layer."""
    return nn.Sequential(
        body(
            recipe.architecture,
            n_features=recipe.X_train.shape[1],
            n_classes=recipe.n_classes,
            widths=(recipe.hidden,),
            image_side=recipe.image_side,
            channels=recipe.channels,
        )
    )


def all_parameters(model: nn.Module, recipe: Recipe) -> list[dict[str, Any]]:
    """One parameter group holding every parameter, with the optimizer's defaults."""
    return [{"params": list(model.parameters())}]


def named_optimizer(groups: list[dict[str, Any]], recipe: Recipe) -> torch.optim.Optimizer:
    """The task's optimizer at its working rate: Adam, or SGD with momentum."""
    if recipe.optimizer == "sgd":
        return torch.optim.SGD(groups, lr=recipe.lr, momentum=recipe.momentum)
    return torch.optim.Adam(groups, lr=recipe.lr)


def shuffled_batches(recipe: Recipe) -> Iterator[Batch]:
    """Endless mini-batches, reshuffled every epoch (see :class:`BatchStream`)."""
    return iter(
        BatchStream(recipe.X_train, recipe.y_train, batch_size=recipe.batch_size, seed=recipe.seed)
    )


def zero_gradients(model: nn.Module, optimizer: torch.optim.Optimizer, step: int) -> None:
    """``zero_grad`` before each backward pass.

    The model's, so that layers left out of the optimizer are cleared too.
    """
    model.zero_grad()


def no_clipping(model: nn.Module, optimizer: torch.optim.Optimizer, step: int) -> None:
    """The healthy recipe clips nothing."""


def optimizer_step(model: nn.Module, optimizer: torch.optim.Optimizer, step: int) -> None:
    """``optimizer.step()``."""
    optimizer.step()


@dataclass(frozen=True, eq=False)
class Recipe:
    """Everything one training run is made of; faults return modified copies."""

    seed: int  # seeds the model init, the batch order, dropout and any fault's randomness
    n_classes: int  # classes the task has
    X_train: np.ndarray  # inputs the loop trains on
    y_train: np.ndarray  # labels the loop trains on
    X_val: np.ndarray  # inputs the run validates on
    y_val: np.ndarray  # labels the run validates on
    architecture: str  # "mlp", "cnn" or "gru" (see faultbench.faults.architectures)
    hidden: int  # width of the hidden layer
    image_side: int  # side of the square images a "cnn" reads
    optimizer: str  # the task's optimizer: "adam", or "sgd" (with momentum)
    lr: float  # the optimizer's learning rate
    batch_size: int  # examples per update
    steps: int  # optimizer updates
    momentum: float = 0.9  # SGD's momentum (unused by Adam)
    channels: int = CNN_CHANNELS  # feature maps of the CNN's convolution
    make_model: ModelFactory = standard_model  # builds the model once the seed is set
    loss: LossFn = F.cross_entropy  # loss(output, target), what backward starts from
    param_groups: GroupsFactory = all_parameters  # the optimizer's parameter groups
    make_optimizer: OptimizerFactory = named_optimizer  # builds the optimizer from the groups
    loader: LoaderFactory = shuffled_batches  # the endless stream of training batches
    clear: StepPart = zero_gradients  # before backward: where zero_grad lives
    clip: StepPart = no_clipping  # between backward and the update: where clipping lives
    update: StepPart = optimizer_step  # applies the gradients: where optimizer.step() lives
    inapplicable: Mapping[str, str] = field(default_factory=dict)  # fault -> why it cannot apply

    def replace(self, **changes: Any) -> Recipe:
        """A copy with some fields changed."""
        return dataclasses.replace(self, **changes)

    def rng(self, purpose: str) -> np.random.Generator:
        """A generator seeded from the run's seed and ``purpose``: a fault's randomness is
        the same in every run of that seed, and independent of every other use."""
        return np.random.Generator(np.random.PCG64([self.seed, zlib.crc32(purpose.encode())]))


def base_setup(task: Task, seed: int) -> Recipe:
    """The healthy recipe of ``task`` for one seed."""
    d = task.defaults
    return Recipe(
        seed=seed,
        n_classes=task.n_classes,
        X_train=task.X_train,
        y_train=task.y_train,
        X_val=task.X_val,
        y_val=task.y_val,
        architecture=d.architecture,
        hidden=d.hidden,
        image_side=d.image_side,
        optimizer=d.optimizer,
        lr=d.lr,
        momentum=d.momentum,
        batch_size=d.batch_size,
        steps=d.steps,
        inapplicable=task.inapplicable,
    )


def steps_per_epoch(recipe: Recipe) -> int:
    """Full batches in one pass over the training data (what the loader yields per epoch)."""
    return max(1, len(recipe.y_train) // min(recipe.batch_size, len(recipe.y_train)))


class BatchStream:
    """Endless shuffled mini-batches, reshuffled every epoch from a seeded generator."""

    def __init__(self, X: np.ndarray, y: np.ndarray, *, batch_size: int, seed: int) -> None:
        self.X = torch.from_numpy(np.ascontiguousarray(X))
        self.y = torch.from_numpy(np.ascontiguousarray(y))
        self.batch_size = min(batch_size, len(y))
        self._rng = np.random.Generator(np.random.PCG64(seed))

    def __iter__(self) -> Iterator[Batch]:
        n = len(self.y)
        while True:
            order = torch.from_numpy(self._rng.permutation(n))
            for start in range(0, n - self.batch_size + 1, self.batch_size):
                idx = order[start : start + self.batch_size]
                yield self.X[idx], self.y[idx]
