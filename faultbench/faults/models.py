"""The known faults of the model and its loss: dead, too small, softmax before the loss.

Each variant says in one line what the bug is, in a user's terms, and which part
of the recipe it lives in; :mod:`faultbench.faults.known` registers them under
their fault.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from faultbench.faults.fault import Severity, Variant
from faultbench.faults.inputs import with_inputs
from faultbench.faults.recipe import Recipe, call, inputs_of

DEAD_MARGIN = 1.0  # how far below the largest training pre-activation a dead bias sits


# -- dead_units ----------------------------------------------------------------


def _kill_units(model: nn.Module, recipe: Recipe, name: str, share: float) -> None:
    """Give the first ``share`` of layer ``name``'s units a bias below every input's
    pre-activation: they output 0 on all data, pass no gradient and never come back.

    With a normalization after the layer, the bias that counts is the
    normalization's shift: a normalized value is at most sqrt(n - 1) over n
    values (a batch for BatchNorm, the layer's units for LayerNorm), so a shift
    below that silences the unit on every batch.
    """
    layer = model.get_submodule(name)
    assert isinstance(layer, nn.Linear)
    n_dead = max(1, round(share * layer.out_features))
    norm = dict(model.named_children()).get(f"{name}_norm")
    with torch.no_grad():
        if isinstance(norm, (nn.BatchNorm1d, nn.LayerNorm)):
            n = recipe.batch_size if isinstance(norm, nn.BatchNorm1d) else layer.out_features
            norm.bias[:n_dead] = -(math.sqrt(max(1, n - 1)) + DEAD_MARGIN)
            return
        highest = _pre_activations(model, layer, recipe)[:, :n_dead].max(dim=0).values
        layer.bias[:n_dead] -= highest + DEAD_MARGIN


def _pre_activations(model: nn.Module, layer: nn.Module, recipe: Recipe) -> torch.Tensor:
    """``layer``'s outputs (bias included) on the training inputs, dropout off."""
    seen: list[torch.Tensor] = []
    hook = layer.register_forward_hook(lambda _m, _i, out: seen.append(out.detach()))
    training = model.training
    model.eval()
    try:
        call(model, inputs_of(recipe, recipe.X_train, recipe.codes_train))
    finally:
        hook.remove()
        model.train(training)
    return seen[0]


def _low_bias(recipe: Recipe, severity: float | None) -> Recipe:
    inner, share = recipe.make_model, float(severity or 0.0)
    name = recipe.pick_hidden("dead_units")

    def with_dead_units(r: Recipe) -> nn.Module:
        model = inner(r)
        _kill_units(model, r, name, share)
        return model

    return recipe.replace(make_model=with_dead_units)


def _negative_init(recipe: Recipe, severity: float | None) -> Recipe:
    inner = recipe.make_model
    name = recipe.pick_hidden("dead_units")

    def negative_layer(r: Recipe) -> nn.Module:
        model = inner(r)
        layer = model.get_submodule(name)
        with torch.no_grad():  # e.g. `nn.init.uniform_(w, -0.1, 0)`, meant (-0.1, 0.1)
            for p in layer.parameters():
                p.abs_().neg_()
        return model

    recipe = recipe.replace(make_model=negative_layer)
    if not _reads_the_inputs(recipe, name):  # it reads a ReLU's output: non-negative already
        return recipe
    # An MLP's first layer reads the inputs: min-max scaled to [0, 1], as pixels often are.
    low = recipe.X_train.min(axis=0)
    span = np.where(np.ptp(recipe.X_train, axis=0) > 0, np.ptp(recipe.X_train, axis=0), 1.0)

    def unit_range(X: np.ndarray) -> np.ndarray:
        return ((X - low) / span).astype(np.float32)

    return with_inputs(recipe, unit_range)


def _reads_the_inputs(recipe: Recipe, name: str) -> bool:
    return recipe.architecture == "mlp" and name == recipe.network.hidden_names[0]


def _relu_units(recipe: Recipe) -> str:
    """Why no unit of the drawn network can be dead from initialization, or ""."""
    activation = recipe.network.activation
    if activation == "relu":
        return ""
    return (
        f"the network's activation is {activation}, not ReLU: its units have no region where "
        "they output 0 with no gradient"
    )


def _silenceable(recipe: Recipe) -> str:
    why = _relu_units(recipe)
    if why:
        return why
    if recipe.network.norm != "none":
        return f"a {recipe.network.norm} normalization after the layer re-centres its outputs"
    name = recipe.pick_hidden("dead_units")
    if recipe.architecture == "gru" and name == recipe.network.hidden_names[0]:
        return "the layer reads a GRU's state, which is signed: no init silences it all"
    if recipe.architecture == "tabular" and name == recipe.network.hidden_names[0]:
        return "the layer reads the codes' embeddings, which are signed: no init silences it all"
    return ""


DEAD_UNITS: tuple[Variant, ...] = (
    Variant(
        "low_bias",
        "a hidden layer's biases start below every pre-activation the data produces",
        "model",
        _low_bias,
        Severity(0.9, 0.05, 1.0, "share of the layer's units killed"),
        why_not=_relu_units,
    ),
    Variant(
        "negative_init",
        "a hidden layer is initialized all-negative, and its inputs are non-negative",
        "model+data",
        _negative_init,
        why_not=_silenceable,
    ),
)


# -- too_small_model -----------------------------------------------------------


def _narrow(recipe: Recipe, severity: float | None) -> Recipe:
    if recipe.architecture == "transformer":  # one residual width: every block is that narrow
        return recipe.replace(widths=(int(severity or 1),) * len(recipe.network.widths), heads=1)
    widths = list(recipe.network.widths)
    at = recipe.network.hidden_names.index(recipe.pick_hidden("too_small_model"))
    widths[at] = int(severity or 1)
    return recipe.replace(widths=tuple(widths))


def _bottleneck(recipe: Recipe, severity: float | None) -> Recipe:
    widths, narrow = recipe.network.widths, (int(severity or 1),)
    if len(widths) == 1:  # one hidden layer: it is repeated on both sides of the bottleneck
        return recipe.replace(widths=(*widths, *narrow, *widths))
    middle = len(widths) // 2
    return recipe.replace(widths=(*widths[:middle], *narrow, *widths[middle:]))


def _one_channel(recipe: Recipe, severity: float | None) -> Recipe:
    return recipe.replace(channels=(*recipe.network.channels[:-1], 1))


def _stacked_only(recipe: Recipe) -> str:
    if recipe.architecture != "transformer":
        return ""
    return "a transformer's blocks add to one residual stream: no layer narrows what follows"


def _convolutional_only(recipe: Recipe) -> str:
    return "" if recipe.architecture == "cnn" else "the model has no convolution"


_WIDTH = "width of the narrow layer (smaller is worse)"
TOO_SMALL_MODEL: tuple[Variant, ...] = (
    Variant(
        "narrow",
        "a hidden layer is far too narrow",
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
        why_not=_stacked_only,
    ),
    Variant(
        "one_channel",
        "the last convolution has one output channel: a single feature map for every shape",
        "model",
        _one_channel,
        why_not=_convolutional_only,
    ),
)


# -- softmax_before_loss -------------------------------------------------------

#: The share of the training targets an output activation may leave out of its reach
#: before it is a bug: below it, the activation is the user's choice (a sigmoid head on
#: pixels in [0, 1], a ReLU on counts), not a fault.
OUT_OF_REACH = 0.1
#: Each kind's form of the bug: the activation that takes the place of the logits.
_FORM = {
    "multiclass": "softmax_before_loss.softmax_module",
    "next_token": "softmax_before_loss.softmax_module",
    "binary": "softmax_before_loss.sigmoid_logits",
    "multilabel": "softmax_before_loss.sigmoid_logits",
    "regression": "softmax_before_loss.sigmoid_output or .relu_output",
    "reconstruction": "softmax_before_loss.sigmoid_output or .relu_output",
}


def _with_head(
    inner: Callable[[Recipe], nn.Module], name: str, head: Callable[[], nn.Module]
) -> Callable[[Recipe], nn.Module]:
    """``inner``'s model with ``head()`` appended as its last module, called ``name``."""

    def headed(r: Recipe) -> nn.Module:
        model = inner(r)
        model.add_module(name, head())
        return model

    return headed


def _softmax() -> nn.Module:
    return nn.Softmax(dim=-1)  # the classes: dim 1 of (N, C) outputs


def _softmax_module(recipe: Recipe, severity: float | None) -> Recipe:
    return recipe.replace(make_model=_with_head(recipe.make_model, "softmax", _softmax))


def _not_for(recipe: Recipe, kinds: tuple[str, ...]) -> str:
    """Why a form of the bug written for targets of ``kinds`` cannot apply, or ""."""
    if recipe.kind.name in kinds:
        return ""
    kind = recipe.kind
    return f"the task is {kind} ({kind.loss_name} loss): the bug's form here is {_FORM[kind.name]}"


def _class_scores(recipe: Recipe) -> str:
    return _not_for(recipe, ("multiclass", "next_token"))


def _class_loss(recipe: Recipe) -> str:
    if recipe.sequences is not None:
        return "the targets are next tokens: nll_loss would read the positions as classes"
    return _not_for(recipe, ("multiclass",))


def _nll_of_probabilities(recipe: Recipe, severity: float | None) -> Recipe:
    return recipe.replace(
        make_model=_with_head(recipe.make_model, "softmax", _softmax), loss=F.nll_loss
    )


def _sigmoid_head(recipe: Recipe, severity: float | None) -> Recipe:
    return recipe.replace(make_model=_with_head(recipe.make_model, "output_sigmoid", nn.Sigmoid))


def _logits_loss(recipe: Recipe) -> str:
    return _not_for(recipe, ("binary", "multilabel"))


def _relu_head(recipe: Recipe, severity: float | None) -> Recipe:
    return recipe.replace(make_model=_with_head(recipe.make_model, "output_relu", nn.ReLU))


def _out_of_reach(recipe: Recipe, low: float, high: float, activation: str) -> str:
    """Why an output activation of range (``low``, ``high``) is no bug on the task, or ""."""
    why = _not_for(recipe, ("regression", "reconstruction"))
    if why:
        return why
    y = recipe.y_train
    share = float(((y < low) | (y > high)).mean())
    if share >= OUT_OF_REACH:
        return ""
    return (
        f"{share:.0%} of the targets lie outside a {activation}'s range ({low:g}, {high:g}): "
        f"the {activation} head is a choice the targets allow, not a bug"
    )


def _sigmoid_reach(recipe: Recipe) -> str:
    return _out_of_reach(recipe, 0.0, 1.0, "sigmoid")


def _relu_reach(recipe: Recipe) -> str:
    return _out_of_reach(recipe, 0.0, math.inf, "ReLU")


SOFTMAX_BEFORE_LOSS: tuple[Variant, ...] = (
    Variant(
        "softmax_module",
        "the model ends in `nn.Softmax`, and its output goes into `cross_entropy`",
        "model",
        _softmax_module,
        why_not=_class_scores,
    ),
    Variant(
        "nll_of_probs",
        "the model ends in `nn.Softmax` (not `LogSoftmax`), and its output goes into `nll_loss`",
        "model+loss",
        _nll_of_probabilities,
        why_not=_class_loss,
    ),
    Variant(
        "sigmoid_logits",
        "the model ends in `nn.Sigmoid`, and its probabilities go into `BCEWithLogitsLoss`",
        "model",
        _sigmoid_head,
        why_not=_logits_loss,
    ),
    Variant(
        "sigmoid_output",
        "a regression's output ends in `nn.Sigmoid`: no prediction leaves (0, 1), the targets do",
        "model",
        _sigmoid_head,
        why_not=_sigmoid_reach,
    ),
    Variant(
        "relu_output",
        "a regression's output ends in `nn.ReLU`: it cannot predict the negative targets",
        "model",
        _relu_head,
        why_not=_relu_reach,
    ),
)
