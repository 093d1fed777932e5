"""The known faults of the model and its loss: dead, too small, softmax before the loss.

Each variant says in one line what the bug is, in a user's terms, and which part
of the recipe it lives in; :mod:`faultbench.faults.known` registers them under
their fault.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from faultbench.faults.architectures import body
from faultbench.faults.fault import Severity, Variant
from faultbench.faults.recipe import Recipe

DEAD_MARGIN = 1.0  # how far below the largest training pre-activation a dead bias sits


# -- dead_units ----------------------------------------------------------------


def _kill_units(model: nn.Module, X: np.ndarray, share: float) -> None:
    # A bias below every training pre-activation makes the unit output 0 on all
    # data, so it passes no gradient and can never come back.
    layer = model.get_submodule("hidden")
    assert isinstance(layer, nn.Linear)
    n_dead = max(1, round(share * layer.out_features))
    seen: list[torch.Tensor] = []
    hook = layer.register_forward_hook(lambda _m, _i, out: seen.append(out.detach()))
    with torch.no_grad():
        model(torch.from_numpy(X))
        hook.remove()
        highest = seen[0][:, :n_dead].max(dim=0).values  # bias included
        layer.bias[:n_dead] -= highest + DEAD_MARGIN


def _low_bias(recipe: Recipe, severity: float | None) -> Recipe:
    inner, share = recipe.make_model, float(severity or 0.0)

    def with_dead_units(r: Recipe) -> nn.Module:
        model = inner(r)
        _kill_units(model, r.X_train, share)
        return model

    return recipe.replace(make_model=with_dead_units)


def _negative_init(recipe: Recipe, severity: float | None) -> Recipe:
    inner = recipe.make_model

    def negative_hidden(r: Recipe) -> nn.Module:
        model = inner(r)
        layer = model.get_submodule("hidden")
        with torch.no_grad():  # e.g. `nn.init.uniform_(w, -0.1, 0)`, meant (-0.1, 0.1)
            for p in layer.parameters():
                p.abs_().neg_()
        return model

    recipe = recipe.replace(make_model=negative_hidden)
    if recipe.architecture != "mlp":  # the layer reads a ReLU's output: non-negative already
        return recipe
    # The MLP's hidden layer reads the inputs: min-max scaled to [0, 1], as pixels often are.
    low = recipe.X_train.min(axis=0)
    span = np.where(np.ptp(recipe.X_train, axis=0) > 0, np.ptp(recipe.X_train, axis=0), 1.0)

    def unit_range(X: np.ndarray) -> np.ndarray:
        return ((X - low) / span).astype(np.float32)

    return recipe.replace(X_train=unit_range(recipe.X_train), X_val=unit_range(recipe.X_val))


def _non_negative_inputs(recipe: Recipe) -> str:
    if recipe.architecture == "gru":
        return "the hidden layer reads a GRU's state, which is signed: no init silences it all"
    return ""


DEAD_UNITS: tuple[Variant, ...] = (
    Variant(
        "low_bias",
        "the hidden layer's biases start below every pre-activation the data produces",
        "model",
        _low_bias,
        Severity(0.9, 0.05, 1.0, "share of hidden units killed"),
    ),
    Variant(
        "negative_init",
        "the hidden layer is initialized all-negative, and its inputs are non-negative",
        "model+data",
        _negative_init,
        why_not=_non_negative_inputs,
    ),
)


# -- too_small_model -----------------------------------------------------------


def _narrow(recipe: Recipe, severity: float | None) -> Recipe:
    return recipe.replace(hidden=int(severity or 1))


def _bottleneck(recipe: Recipe, severity: float | None) -> Recipe:
    width = int(severity or 1)

    def deeper_with_bottleneck(r: Recipe) -> nn.Module:
        layers = body(
            r.architecture,
            n_features=r.X_train.shape[1],
            n_classes=r.n_classes,
            widths=(r.hidden, width, r.hidden),
            image_side=r.image_side,
            channels=r.channels,
        )
        return nn.Sequential(layers)

    return recipe.replace(make_model=deeper_with_bottleneck)


def _one_channel(recipe: Recipe, severity: float | None) -> Recipe:
    return recipe.replace(channels=1)


def _convolutional_only(recipe: Recipe) -> str:
    return "" if recipe.architecture == "cnn" else "the model has no convolution"


_WIDTH = "width of the narrow layer (smaller is worse)"
TOO_SMALL_MODEL: tuple[Variant, ...] = (
    Variant(
        "narrow",
        "the hidden layer is far too narrow",
        "model",
        _narrow,
        Severity(2.0, 1.0, 8.0, _WIDTH, worse_when_higher=False),
    ),
    Variant(
        "bottleneck",
        "a deeper network with a narrow bottleneck layer in the middle",
        "model",
        _bottleneck,
        Severity(2.0, 1.0, 8.0, _WIDTH, worse_when_higher=False),
    ),
    Variant(
        "one_channel",
        "the convolution has one output channel: a single feature map for every shape",
        "model",
        _one_channel,
        why_not=_convolutional_only,
    ),
)


# -- softmax_before_loss -------------------------------------------------------


def _with_softmax(inner: Callable[[Recipe], nn.Module]) -> Callable[[Recipe], nn.Module]:
    def softmax_head(r: Recipe) -> nn.Module:
        model = inner(r)
        model.add_module("softmax", nn.Softmax(dim=1))
        return model

    return softmax_head


def _softmax_module(recipe: Recipe, severity: float | None) -> Recipe:
    return recipe.replace(make_model=_with_softmax(recipe.make_model))


def _nll_of_probabilities(recipe: Recipe, severity: float | None) -> Recipe:
    return recipe.replace(make_model=_with_softmax(recipe.make_model), loss=F.nll_loss)


SOFTMAX_BEFORE_LOSS: tuple[Variant, ...] = (
    Variant(
        "softmax_module",
        "the model ends in `nn.Softmax`, and its output goes into `cross_entropy`",
        "model",
        _softmax_module,
    ),
    Variant(
        "nll_of_probs",
        "the model ends in `nn.Softmax` (not `LogSoftmax`), and its output goes into `nll_loss`",
        "model+loss",
        _nll_of_probabilities,
    ),
)
