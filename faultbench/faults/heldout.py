"""Held-out faults: real bugs outside the nine, that no diagnoser is told about.

Their runs belong to the benchmark; their names belong to no label set, so a
diagnoser that notices one can only say ``other_fault`` ("something is
broken, and it is none of the nine"). They are never used to adjust a rule.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import torch
from torch import nn

from faultbench.faults.fault import Severity, Variant, register
from faultbench.faults.recipe import Batch, Recipe


def _sorted_batches(recipe: Recipe) -> Iterator[Batch]:
    """The training set in class order, batch after batch, the same every epoch."""
    order = np.argsort(recipe.y_train, kind="stable")
    X = torch.from_numpy(np.ascontiguousarray(recipe.X_train[order]))
    y = torch.from_numpy(np.ascontiguousarray(recipe.y_train[order]))
    size = min(recipe.batch_size, len(y))
    while True:
        for start in range(0, len(y) - size + 1, size):
            yield X[start : start + size], y[start : start + size]


def _sorted_classes(recipe: Recipe, severity: float | None) -> Recipe:
    return recipe.replace(loader=_sorted_batches)


def _shuffled_targets(recipe: Recipe, severity: float | None) -> Recipe:
    rng = recipe.rng("shuffled_targets")
    return recipe.replace(y_train=rng.permutation(recipe.y_train))


def _label_noise(recipe: Recipe, severity: float | None) -> Recipe:
    # Each noisy label moves to one of the other classes, uniformly: the share is
    # exactly the share of wrong labels.
    rng = recipe.rng("label_noise")
    y = recipe.y_train.copy()
    noisy = rng.random(len(y)) < float(severity or 0.0)
    y[noisy] = (y[noisy] + rng.integers(1, recipe.n_outputs, int(noisy.sum()))) % recipe.n_outputs
    return recipe.replace(y_train=y)


def _deep_sigmoid(recipe: Recipe, severity: float | None) -> Recipe:
    depth, width = int(severity or 1), recipe.network.widths[-1]
    return recipe.replace(widths=(width,) * depth, activation="sigmoid", norm="none")


def _tiny_clip(recipe: Recipe, severity: float | None) -> Recipe:
    max_norm = float(severity or 1.0)

    def clip_everything(model: nn.Module, opt: torch.optim.Optimizer, step: int) -> None:
        nn.utils.clip_grad_norm_(model.parameters(), max_norm)

    return recipe.replace(clip=clip_everything)


def _huge_weight_decay(recipe: Recipe, severity: float | None) -> Recipe:
    inner, decay = recipe.param_groups, float(severity or 0.0)

    def decayed(model: nn.Module, r: Recipe) -> list[dict[str, Any]]:
        return [{**g, "weight_decay": decay} for g in inner(model, r)]

    return recipe.replace(param_groups=decayed)


def _held_out(name: str, summary: str, variant: Variant) -> None:
    register(name, summary, variant, held_out=True)


_held_out(
    "sorted_classes",
    "the training set is sorted by class and never shuffled",
    Variant(
        "unshuffled",
        "examples stored class by class, loaded in that order every epoch (`shuffle=False`)",
        "loader",
        _sorted_classes,
    ),
)
_held_out(
    "shuffled_targets",
    "the targets were shuffled apart from their inputs",
    Variant(
        "separate_shuffle",
        "`y` shuffled on its own (`np.random.shuffle(y)`): no input keeps its label",
        "data",
        _shuffled_targets,
    ),
)
_held_out(
    "label_noise",
    "a large share of the training labels are wrong",
    Variant(
        "random_wrong",
        "many training labels replaced by a wrong class (careless annotation, a broken join)",
        "data",
        _label_noise,
        Severity(0.5, 0.1, 0.9, "share of training labels moved to another class"),
    ),
)
_held_out(
    "deep_sigmoid",
    "gradients vanish in a deep stack of sigmoid layers",
    Variant(
        "sigmoid_stack",
        "a deep network of sigmoid activations: the early layers barely get a gradient",
        "model",
        _deep_sigmoid,
        Severity(8.0, 4.0, 40.0, "number of sigmoid layers"),
    ),
)
_held_out(
    "tiny_clip",
    "gradients are clipped to a tiny norm, so the updates are tiny",
    Variant(
        "clip_norm",
        "`clip_grad_norm_(params, max_norm)` with a max_norm many orders of magnitude too small",
        "step",
        _tiny_clip,
        # Adam undoes a gradient's scale down to about its epsilon (1e-8 per weight),
        # so under Adam a clip shows in the weights only this far down.
        Severity(1e-7, 1e-10, 1e-2, "max_norm of the clipping (smaller is worse)", False),
    ),
)
_held_out(
    "huge_weight_decay",
    "the weight decay is so large that the weights are held near zero",
    Variant(
        "decay",
        "`weight_decay` orders of magnitude too large (1.0 where 1e-4 was meant)",
        "optimizer",
        _huge_weight_decay,
        Severity(1.0, 0.01, 100.0, "weight decay coefficient"),
    ),
)
