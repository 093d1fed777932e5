"""The known faults of the data: inputs off unit scale, labels that disagree.

Each variant says in one line what the bug is, in a user's terms, and which part
of the recipe it lives in; :mod:`faultbench.faults.known` registers them under
their fault.
"""

from __future__ import annotations

import numpy as np

from faultbench.faults.fault import Severity, Variant
from faultbench.faults.language import TWO_VOCABULARIES
from faultbench.faults.recipe import Recipe

# -- huge_inputs ---------------------------------------------------------------


def _scaled(recipe: Recipe, severity: float | None) -> Recipe:
    scale = np.float32(severity)
    return recipe.replace(X_train=recipe.X_train * scale, X_val=recipe.X_val * scale)


def _scale_kept(recipe: Recipe) -> str:
    norm = recipe.network.norm
    if norm == "none":
        return ""
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

    return recipe.replace(X_train=raw(recipe.X_train), X_val=raw(recipe.X_val))


def _pixels(recipe: Recipe, severity: float | None) -> Recipe:
    low, high = float(recipe.X_train.min()), float(recipe.X_train.max())

    def as_bytes(X: np.ndarray) -> np.ndarray:
        return ((X - low) * (255.0 / (high - low))).astype(np.float32)

    return recipe.replace(X_train=as_bytes(recipe.X_train), X_val=as_bytes(recipe.X_val))


def _classes_only(recipe: Recipe) -> str:
    if recipe.sequences is None:
        return ""
    return "the targets are next tokens, not classes (label_mismatch.vocabulary: their mapping)"


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
    if recipe.sequences is not None:
        return _classes_only(recipe)
    recode = _by_appearance(recipe.y_val, recipe.n_outputs)
    if (recode == np.arange(recipe.n_outputs)).all():
        return "the validation labels first appear in sorted order: both encoders agree"
    return ""


def _swapped(recipe: Recipe, severity: float | None) -> Recipe:
    swap = np.arange(recipe.n_outputs)
    swap[[0, 1]] = [1, 0]
    return recipe.replace(y_train=swap[recipe.y_train])


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
)
