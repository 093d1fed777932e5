"""The known faults of the data: inputs off unit scale, targets that disagree.

Each variant says in one line what the bug is, in a user's terms, and which part
of the recipe it lives in; :mod:`faultbench.faults.known` registers them under
their fault. A variant written for one kind of targets (class indices, a label
matrix, real values) says, on a task of another kind, which variant is the same
bug there.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from faultbench.faults.fault import Severity, Variant
from faultbench.faults.language import TWO_VOCABULARIES
from faultbench.faults.optimization import ADAPTIVE
from faultbench.faults.recipe import Recipe

# -- huge_inputs ---------------------------------------------------------------


def with_inputs(recipe: Recipe, change: Callable[[np.ndarray], np.ndarray]) -> Recipe:
    """``recipe`` whose numeric inputs of both splits went through ``change`` (categorical
    codes are indices and stay). An autoencoder's targets are its inputs: the user's data
    went in unnormalized, so what the model must rebuild is changed too."""
    out = recipe.replace(X_train=change(recipe.X_train), X_val=change(recipe.X_val))
    if recipe.kind.name == "reconstruction":
        out = out.replace(y_train=out.X_train.copy(), y_val=out.X_val.copy())
    return out


def _scaled(recipe: Recipe, severity: float | None) -> Recipe:
    scale = np.float32(severity)
    return with_inputs(recipe, lambda X: X * scale)


def _numeric_inputs(recipe: Recipe) -> str:
    if recipe.X_train.shape[1]:
        return ""
    return "the model's only inputs are categorical codes (embedding indices): no number to scale"


def _scale_kept(recipe: Recipe) -> str:
    norm = recipe.network.norm
    if recipe.kind.name == "reconstruction" and recipe.optimizer in ADAPTIVE:
        # Measured on a digits autoencoder (Adam, 3 seeds): validation R2 0.60-0.63 against
        # healthy 0.64-0.69, one run of three outside the healthy spread; under SGD the
        # same bug diverges within three steps.
        return (
            "an autoencoder's targets are its inputs: scaled by one factor together, a "
            f"fit scales with them and {recipe.optimizer}'s steps do not grow with the "
            "gradient: the run is the healthy one, up to scale"
        )
    if norm == "none" or recipe.kind.name == "reconstruction" or recipe.code_sizes:
        # A reconstruction's targets stay scaled, and codes' embeddings do not scale: the
        # normalization divides the inputs' scale out of neither.
        return _numeric_inputs(recipe)
    return (
        f"a {norm} normalization after the first layer divides a uniform scale of the inputs "
        "back out: scaling them changes nothing the run computes"
    )


def _unstandardized(recipe: Recipe, severity: float | None) -> Recipe:
    # Raw tabular columns: each on its own scale (0.1 up to 10**(severity - 1)),
    # away from zero (positive means of 1-3 spreads), as income, age and ratios are.
    rng = recipe.rng("huge_inputs.unstandardized")
    n = recipe.X_train.shape[1]
    scale = 10.0 ** rng.permutation(np.linspace(-1.0, float(severity or 2.0) - 1.0, n))
    offset = rng.uniform(1.0, 3.0, size=n)

    def raw(X: np.ndarray) -> np.ndarray:
        return ((X + offset) * scale).astype(np.float32)

    return with_inputs(recipe, raw)


def _pixels(recipe: Recipe, severity: float | None) -> Recipe:
    low, high = float(recipe.X_train.min()), float(recipe.X_train.max())

    def as_bytes(X: np.ndarray) -> np.ndarray:
        return ((X - low) * (255.0 / (high - low))).astype(np.float32)

    return with_inputs(recipe, as_bytes)


def _images_only(recipe: Recipe) -> str:
    return "" if recipe.image_side else "the inputs are not images (the task reads no image side)"


HUGE_INPUTS: tuple[Variant, ...] = (
    Variant(
        "scaled",
        "the inputs are multiplied by a large factor (a unit conversion applied twice)",
        "data",
        _scaled,
        Severity(1000.0, 2.0, 1e6, "factor multiplying the inputs"),
        why_not=_scale_kept,
    ),
    Variant(
        "unstandardized",
        "raw feature columns go in unstandardized, their scales spread over orders of magnitude",
        "data",
        _unstandardized,
        Severity(5.0, 2.0, 8.0, "orders of magnitude the column scales span, from 0.1 up"),
        why_not=_numeric_inputs,
    ),
    Variant(
        "pixels_0_255",
        "images go in as 0-255 values: the `/ 255` and the normalization were forgotten",
        "data",
        _pixels,
        why_not=_images_only,
    ),
)


# -- label_mismatch ------------------------------------------------------------

#: Each kind's form of the bug.
_FORM = {
    "multiclass": "label_mismatch (shifted, two_encoders, swapped)",
    "binary": "label_mismatch.positive_flipped",
    "multilabel": "label_mismatch.label_columns",
    "regression": "label_mismatch.misaligned",
}


def _not_for(recipe: Recipe, kind: str) -> str:
    """Why a form of label_mismatch written for targets of ``kind`` cannot apply, or ""."""
    if recipe.sequences is not None:
        return "the targets are next tokens, not classes (label_mismatch.vocabulary: their mapping)"
    if recipe.kind.name == kind:
        return ""
    if recipe.kind.name == "reconstruction":
        return "an autoencoder's targets are its own inputs: no labels to encode apart"
    return f"the task is {recipe.kind.name}: the bug's form here is {_FORM[recipe.kind.name]}"


def _classes_only(recipe: Recipe) -> str:
    return _not_for(recipe, "multiclass")


def _binary_only(recipe: Recipe) -> str:
    return _not_for(recipe, "binary")


def _regression_only(recipe: Recipe) -> str:
    return _not_for(recipe, "regression")


def _shifted(recipe: Recipe, severity: float | None) -> Recipe:
    # A cyclic shift is a permutation with no fixed point for any class count >= 2.
    shifted = (recipe.y_train + 1) % recipe.n_outputs
    return recipe.replace(y_train=shifted.astype(np.int64))


def _by_appearance(y: np.ndarray, n_classes: int) -> np.ndarray:
    """For each (sorted) class index, the index an encoder numbering classes in their
    order of first appearance in ``y`` gives it."""
    order = list(dict.fromkeys(int(c) for c in y))
    order += [c for c in range(n_classes) if c not in order]
    recode = np.empty(n_classes, dtype=np.int64)
    recode[order] = np.arange(n_classes)
    return recode


def _two_encoders(recipe: Recipe, severity: float | None) -> Recipe:
    recode = _by_appearance(recipe.y_val, recipe.n_outputs)
    return recipe.replace(y_val=recode[recipe.y_val])


def _encoders_differ(recipe: Recipe) -> str:
    why = _classes_only(recipe)
    if why:
        return why
    recode = _by_appearance(recipe.y_val, recipe.n_outputs)
    if (recode == np.arange(recipe.n_outputs)).all():
        return "the validation labels first appear in sorted order: both encoders agree"
    return ""


def _swapped(recipe: Recipe, severity: float | None) -> Recipe:
    swap = np.arange(recipe.n_outputs)
    swap[[0, 1]] = [1, 0]
    return recipe.replace(y_train=swap[recipe.y_train])


def _positive_flipped(recipe: Recipe, severity: float | None) -> Recipe:
    return recipe.replace(y_val=(1.0 - recipe.y_val).astype(np.float32))


def _column_order(y: np.ndarray) -> np.ndarray:
    """The label columns in the order an encoder fitted on ``y``'s rows numbers them: by
    first appearance (a label no row holds comes last, in sorted order)."""
    held = y > 0.5
    first = np.where(held.any(axis=0), held.argmax(axis=0), len(y))
    return np.argsort(first, kind="stable")


def _label_columns(recipe: Recipe, severity: float | None) -> Recipe:
    # Column k of validation's matrix is the label its own encoder numbered k.
    return recipe.replace(y_val=np.ascontiguousarray(recipe.y_val[:, _column_order(recipe.y_val)]))


def _columns_differ(recipe: Recipe) -> str:
    why = _not_for(recipe, "multilabel")
    if why:
        return why
    if (_column_order(recipe.y_val) == np.arange(recipe.y_val.shape[1])).all():
        return "the validation labels first appear in column order: both encoders agree"
    return ""


def _misaligned(recipe: Recipe, severity: float | None) -> Recipe:
    return recipe.replace(y_val=np.roll(recipe.y_val, -1, axis=0))


LABEL_MISMATCH: tuple[Variant, ...] = (
    Variant(
        "shifted",
        "the training labels are off by one class (a 1-based class list read as 0-based)",
        "data",
        _shifted,
        why_not=_classes_only,
    ),
    Variant(
        "two_encoders",
        "class names encoded in sorted order for training, in order of appearance for validation",
        "data",
        _two_encoders,
        why_not=_encoders_differ,
    ),
    Variant(
        "swapped",
        "a hand-written class mapping swaps two classes in the training labels",
        "data",
        _swapped,
        why_not=_classes_only,
    ),
    TWO_VOCABULARIES,
    Variant(
        "positive_flipped",
        "the validation set encodes the positive class the other way (0 where training has 1)",
        "data",
        _positive_flipped,
        why_not=_binary_only,
    ),
    Variant(
        "label_columns",
        "each split's label matrix has its own encoder: validation's columns in another order",
        "data",
        _label_columns,
        why_not=_columns_differ,
    ),
    Variant(
        "misaligned",
        "the validation targets are joined to their inputs off by one row",
        "data",
        _misaligned,
        why_not=_regression_only,
    ),
)
