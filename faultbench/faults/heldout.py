"""Held-out faults: real bugs outside the known ones, that no diagnoser is told about.

Their runs belong to the benchmark; their names belong to no label set, so a
diagnoser that notices one can only say ``other_fault`` ("something is
broken, and it is none of the known faults"). They are never used to adjust a
rule. Some exist only in some kinds of task (a regression's raw targets, a
logits loss's ``pos_weight``); each variant says why where it cannot apply.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from faultbench.faults.fault import Severity, Variant, register
from faultbench.faults.recipe import Batch, Recipe, Scorer, inputs_of, rows

_NO_TARGETS = "an autoencoder's targets are its own inputs"


def _has_targets(recipe: Recipe) -> str:
    if recipe.kind.name != "reconstruction":
        return ""
    return f"{_NO_TARGETS}: no target column to sort or shuffle apart from them"


def _target_order(y: np.ndarray) -> np.ndarray:
    """The rows sorted by their target (by class; a label set or several targets column
    by column), equal targets in their stored order."""
    columns = y.reshape(len(y), -1)
    return np.lexsort(columns.T[::-1])


def _sorted_batches(recipe: Recipe) -> Iterator[Batch]:
    """The training set in target order, batch after batch, the same every epoch."""
    order = _target_order(recipe.y_train)
    codes = None if recipe.codes_train is None else recipe.codes_train[order]
    inputs = inputs_of(recipe, np.ascontiguousarray(recipe.X_train[order]), codes)
    y = torch.from_numpy(np.ascontiguousarray(recipe.y_train[order]))
    size = min(recipe.batch_size, len(y))
    while True:
        for start in range(0, len(y) - size + 1, size):
            yield rows(inputs, slice(start, start + size)), y[start : start + size]


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


def _flipped_labels(recipe: Recipe, severity: float | None) -> Recipe:
    rng = recipe.rng("label_noise.flipped")
    y = recipe.y_train.copy()
    flip = rng.random(y.shape) < float(severity or 0.0)
    y[flip] = 1.0 - y[flip]
    return recipe.replace(y_train=y)


def _rows_mixed(recipe: Recipe, severity: float | None) -> Recipe:
    # The chosen rows' targets are dealt out among themselves: each gets another row's.
    rng = recipe.rng("label_noise.wrong_rows")
    y = recipe.y_train.copy()
    chosen = np.flatnonzero(rng.random(len(y)) < float(severity or 0.0))
    y[chosen] = y[np.roll(chosen, 1)]
    return recipe.replace(y_train=y)


def _kind_in(recipe: Recipe, kinds: tuple[str, ...]) -> str:
    """ "" when the task's kind is one of ``kinds``; else the start of why not."""
    if recipe.kind.name in kinds and recipe.sequences is None:
        return ""
    return f"the task is {recipe.kind.name}"


#: label_noise's form on each kind of targets.
_NOISE = {
    "multiclass": "label_noise (random_wrong)",
    "binary": "label_noise.flipped",
    "multilabel": "label_noise.flipped",
    "regression": "label_noise.wrong_rows",
}


def _noise_form(recipe: Recipe, kinds: tuple[str, ...]) -> str:
    why = _kind_in(recipe, kinds)
    if not why:
        return ""
    if recipe.kind.name in _NOISE:
        return f"{why}: the bug's form here is {_NOISE[recipe.kind.name]}"
    return f"{why}: {_NO_TARGETS}, none of them a label to get wrong"


def _class_labels(recipe: Recipe) -> str:
    return _noise_form(recipe, ("multiclass",))


def _yes_no_labels(recipe: Recipe) -> str:
    return _noise_form(recipe, ("binary", "multilabel"))


def _real_targets(recipe: Recipe) -> str:
    return _noise_form(recipe, ("regression",))


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


RAW_MEAN = 2.0  # raw targets' mean, in spreads: positive quantities (prices, counts, doses)


def _raw_targets(recipe: Recipe, severity: float | None) -> Recipe:
    # The task's targets were standardized; the user's are in their own units again, as
    # scikit-learn's diabetes targets are (mean 152, spread 77).
    spread = float(severity or 1.0)

    def raw(y: np.ndarray) -> np.ndarray:
        return ((y + RAW_MEAN) * spread).astype(np.float32)

    return recipe.replace(y_train=raw(recipe.y_train), y_val=raw(recipe.y_val))


def _flat_targets(recipe: Recipe, severity: float | None) -> Recipe:
    # `y = df["target"].values`: one value per row, against the model's (N, 1) output.
    return recipe.replace(
        y_train=np.ascontiguousarray(recipe.y_train[:, 0]),
        y_val=np.ascontiguousarray(recipe.y_val[:, 0]),
    )


def _regression_values(recipe: Recipe) -> str:
    why = _kind_in(recipe, ("regression",))
    if why and recipe.kind.name == "reconstruction":
        return f"{why}: {_NO_TARGETS}; left unscaled, they are huge_inputs"
    return f"{why}: its targets have no units to standardize" if why else ""


#: Why another kind's loss never meets (N,) targets against an (N, 1) output silently.
_NO_BROADCAST = {
    "multiclass": "cross_entropy takes (N,) class indices against (N, C) scores: the healthy shape",
    "binary": "BCEWithLogitsLoss refuses targets of another shape than its input: it raises",
    "multilabel": "BCEWithLogitsLoss refuses targets of another shape than its input: it raises",
    "next_token": "cross_entropy takes (N, T) token indices against (N, T, V) scores",
    "reconstruction": f"{_NO_TARGETS}, of the output's (N, features) shape",
}


def _one_target(recipe: Recipe) -> str:
    why = _kind_in(recipe, ("regression",))
    if why:
        return f"{why}: {_NO_BROADCAST[recipe.kind.name]}"
    if recipe.y_train.shape[1] != 1:
        return (
            f"{recipe.y_train.shape[1]} targets per row: (N, {recipe.y_train.shape[1]}) "
            "predictions against (N,) targets do not broadcast, the bug raises at once"
        )
    return ""


def _positive_share(y: np.ndarray) -> np.ndarray:
    return np.asarray(y, dtype=np.float64).reshape(len(y), -1).mean(axis=0)


#: How uneven some label must be for a script to weight it (and so to get the weight
#: backwards): 3 to 1 or more, a positive share at most 0.25 or at least 0.75. Measured on a
#: generated binary task with 35% positives (weight 0.53 where 1.9 was meant): 0 of 3
#: seeds outside the healthy spread.
UNEVEN = 3.0


def _inverted_pos_weight(recipe: Recipe, severity: float | None) -> Recipe:
    p = _positive_share(recipe.y_train)
    weight = torch.from_numpy((p / (1.0 - p)).astype(np.float32))  # meant: negatives / positives
    loss = functools.partial(F.binary_cross_entropy_with_logits, pos_weight=weight)
    return recipe.replace(loss=loss)


def _uneven_labels(recipe: Recipe) -> str:
    why = _kind_in(recipe, ("binary", "multilabel"))
    if why:
        return f"{why} ({recipe.kind.loss_name} loss): no BCEWithLogitsLoss, no pos_weight"
    p = _positive_share(recipe.y_train)
    odds = p / (1.0 - p)
    if np.maximum(odds, 1.0 / odds).max() >= UNEVEN:
        return ""
    return (
        f"every label is nearly even (positive shares {p.min():.2f}-{p.max():.2f}): an "
        "inverted pos_weight is as near 1 as the right one"
    )


def _scored_in_train_mode(recipe: Recipe, severity: float | None) -> Recipe:
    inner = recipe.make_scorer

    def scorer(r: Recipe) -> Scorer:
        score = inner(r)

        def in_train_mode(model: nn.Module) -> dict[str, float]:
            was = model.training
            model.train()  # the evaluation's `model.eval()` is missing
            try:
                return score(model)
            finally:
                model.train(was)

        return in_train_mode

    return recipe.replace(make_scorer=scorer)


def _has_dropout(recipe: Recipe) -> str:
    if recipe.network.dropout > 0:
        return ""
    return "the network has no dropout: an evaluation in train mode draws no random mask"


def _held_out(name: str, summary: str, variant: Variant) -> None:
    register(name, summary, variant, held_out=True)


_held_out(
    "sorted_classes",
    "the training set is sorted by class (or by target) and never shuffled",
    Variant(
        "unshuffled",
        "examples stored class by class (or by target), loaded in that order every epoch",
        "loader",
        _sorted_classes,
        why_not=_has_targets,
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
        why_not=_has_targets,
    ),
)
register(
    "label_noise",
    "a large share of the training labels (or targets) are wrong",
    Variant(
        "random_wrong",
        "many training labels replaced by a wrong class (careless annotation, a broken join)",
        "data",
        _label_noise,
        Severity(0.5, 0.1, 0.9, "share of training labels moved to another class"),
        why_not=_class_labels,
    ),
    Variant(
        "flipped",
        "many yes/no training labels flipped (careless annotation, a label read inverted)",
        "data",
        _flipped_labels,
        Severity(0.3, 0.05, 0.45, "share of training labels flipped"),
        why_not=_yes_no_labels,
    ),
    Variant(
        "wrong_rows",
        "many training targets come from other rows (a join on a key that is not unique)",
        "data",
        _rows_mixed,
        Severity(0.5, 0.1, 0.9, "share of training rows given another row's target"),
        why_not=_real_targets,
    ),
    held_out=True,
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
_held_out(
    "raw_targets",
    "a regression's targets are left in their raw units: never standardized",
    Variant(
        "unscaled",
        "the targets go in as recorded (hundreds, thousands) while the inputs are standardized",
        "data",
        _raw_targets,
        Severity(100.0, 3.0, 1e5, "the raw targets' spread (standard deviation)"),
        why_not=_regression_values,
    ),
)
_held_out(
    "broadcast_targets",
    "(N, 1) predictions against (N,) targets: the loss broadcasts them to (N, N)",
    Variant(
        "flat_targets",
        "`mse_loss(model(x), y)` with `y` of shape (N,): every prediction meets every target",
        "data",
        _flat_targets,
        why_not=_one_target,
    ),
)
_held_out(
    "inverted_pos_weight",
    "BCEWithLogitsLoss's pos_weight is inverted: the rare labels are weighted down",
    Variant(
        "positives_over_negatives",
        "`pos_weight = n_pos / n_neg` where `n_neg / n_pos` was meant",
        "loss",
        _inverted_pos_weight,
        why_not=_uneven_labels,
    ),
)
_held_out(
    "dropout_at_eval",
    "the evaluation runs in train mode: dropout stays on while the model is scored",
    Variant(
        "no_eval_mode",
        "`model.eval()` is missing before validation: each score is of a randomly thinned model",
        "evaluation",
        _scored_in_train_mode,
        why_not=_has_dropout,
    ),
)
