"""The nine known faults, each in the forms it takes in real training scripts.

Every variant says in one line what the bug is, in a user's terms, and which
part of the recipe it lives in; its transform puts exactly that bug there,
by wrapping or replacing that part. The first variant of each fault is its
classic form: the one the benchmark started with, which the classic grid runs.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Dataset

from faultbench.faults.architectures import body
from faultbench.faults.fault import Severity, Variant, register
from faultbench.faults.recipe import Batch, Recipe, steps_per_epoch

DEAD_MARGIN = 1.0  # how far below the largest training pre-activation a dead bias sits
CALIBRATION_STEPS = 20  # steps a starved loader times before it starts to starve the loop
WARMUP_SHARE = 0.1  # share of the run a warm-up schedule spends reaching its peak

# -- missing_zero_grad ------------------------------------------------------------


def _no_clearing(model: nn.Module, optimizer: torch.optim.Optimizer, step: int) -> None:
    """The loop has no ``zero_grad``: backward adds onto every earlier step's gradients."""


def _never(recipe: Recipe, severity: float | None) -> Recipe:
    return recipe.replace(clear=_no_clearing)


def _per_epoch(recipe: Recipe, severity: float | None) -> Recipe:
    inner, every = recipe.clear, steps_per_epoch(recipe)

    def clear_at_epoch_start(model: nn.Module, opt: torch.optim.Optimizer, step: int) -> None:
        if (step - 1) % every == 0:
            inner(model, opt, step)

    return recipe.replace(clear=clear_at_epoch_start)


register(
    "missing_zero_grad",
    "gradients are not cleared before each backward pass, so they pile up across steps",
    Variant("never", "`optimizer.zero_grad()` is missing from the training loop", "step", _never),
    Variant(
        "per_epoch",
        "`zero_grad()` sits in the epoch loop, not the batch loop: cleared once per epoch",
        "step",
        _per_epoch,
    ),
)

# -- huge_inputs ----------------------------------------------------------------------


def _scaled(recipe: Recipe, severity: float | None) -> Recipe:
    scale = np.float32(severity)
    return recipe.replace(X_train=recipe.X_train * scale, X_val=recipe.X_val * scale)


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


def _images_only(recipe: Recipe) -> str:
    return "" if recipe.image_side else "the inputs are not images (the task reads no image side)"


register(
    "huge_inputs",
    "inputs reach the model far off unit scale: not normalized, or scaled far up",
    Variant(
        "scaled",
        "the inputs are multiplied by a large factor (a unit conversion applied twice)",
        "data",
        _scaled,
        Severity(1000.0, 2.0, 1e6, "factor multiplying the inputs"),
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

# -- lr_too_high ----------------------------------------------------------------------


def _constant(recipe: Recipe, severity: float | None) -> Recipe:
    return recipe.replace(lr=recipe.lr * float(severity or 1.0))


def _warmup_factor(step: int, warm: int, total: int) -> float:
    """Linear warm-up to 1 over ``warm`` steps, then a cosine decay to 0 at ``total``."""
    if step <= warm:
        return step / warm
    return 0.5 * (1.0 + math.cos(math.pi * (step - warm) / max(1, total - warm)))


def _warmup(recipe: Recipe, severity: float | None) -> Recipe:
    inner, peak, total = recipe.update, float(severity or 1.0), recipe.steps
    warm = max(1, round(WARMUP_SHARE * total))

    def scheduled_update(model: nn.Module, opt: torch.optim.Optimizer, step: int) -> None:
        for group in opt.param_groups:
            base = group.setdefault("working_lr", group["lr"])
            group["lr"] = base * peak * _warmup_factor(step, warm, total)
        inner(model, opt, step)

    return recipe.replace(update=scheduled_update)


def _sgd_only(recipe: Recipe) -> str:
    if recipe.optimizer == "sgd":
        return ""
    return f"the task trains with {recipe.optimizer}, not SGD with momentum"


register(
    "lr_too_high",
    "the learning rate is far above the task's working rate",
    Variant(
        "constant",
        "the optimizer is built with a rate far above the working one",
        "optimizer",
        _constant,
        Severity(100.0, 2.0, 1e4, "factor multiplying the working learning rate"),
    ),
    Variant(
        "warmup",
        "a warm-up schedule (then cosine decay) whose peak is far above the working rate",
        "step",
        _warmup,
        Severity(100.0, 2.0, 1e4, "the schedule's peak, as a multiple of the working rate"),
    ),
    Variant(
        "sgd_momentum",
        "SGD with momentum at several times its working rate: momentum carries each overshoot on",
        "optimizer",
        _constant,
        Severity(10.0, 2.0, 1e3, "factor multiplying SGD's working learning rate"),
        why_not=_sgd_only,
    ),
)

# -- dead_units -----------------------------------------------------------------------


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


register(
    "dead_units",
    "hidden ReLU units are dead from initialization: they output 0 on every input",
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

# -- starved_loader -------------------------------------------------------------------


def _paced(
    batches: Iterator[Batch], multiple: float, wait: Callable[[float], None]
) -> Iterator[Batch]:
    """Yield from ``batches``; before fetching each, ``wait(multiple x compute per step)``.

    The compute per step is measured, not assumed: the median time the loop
    spent between receiving a batch and asking for the next one, over its
    first ``CALIBRATION_STEPS`` steps (which are not starved). So a severity
    means the same share of waiting on a fast machine and on a slow one.
    """
    gaps: list[float] = []
    per_step = 0.0
    handed: float | None = None
    while True:
        if handed is not None and len(gaps) < CALIBRATION_STEPS:
            gaps.append(time.perf_counter() - handed)
            if len(gaps) == CALIBRATION_STEPS:
                per_step = statistics.median(gaps)
        wait(multiple * per_step)
        batch = next(batches)
        handed = time.perf_counter()
        yield batch


def _sleep(seconds: float) -> None:
    if seconds > 0:
        time.sleep(seconds)


def _pause(recipe: Recipe, severity: float | None) -> Recipe:
    inner, multiple = recipe.loader, float(severity or 0.0)

    def paused(r: Recipe) -> Iterator[Batch]:
        return _paced(inner(r), multiple, _sleep)

    return recipe.replace(loader=paused)


class _SlowItems(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """The training examples one at a time, each after ``work`` seconds of CPU work
    (what decoding or augmenting an item costs)."""

    def __init__(self, X: np.ndarray, y: np.ndarray) -> None:
        self.X = torch.from_numpy(np.ascontiguousarray(X))
        self.y = torch.from_numpy(np.ascontiguousarray(y))
        self.work = 0.0  # seconds per item, set once the loop's pace is measured

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        end = time.perf_counter() + self.work
        while time.perf_counter() < end:  # busy, as a decoder keeps the CPU
            pass
        return self.X[i], self.y[i]


def _epochs(loader: DataLoader[Any]) -> Iterator[Batch]:
    while True:
        yield from loader


def _slow_dataset(recipe: Recipe, severity: float | None) -> Recipe:
    multiple = float(severity or 0.0)

    def dataloader(r: Recipe) -> Iterator[Batch]:
        items = _SlowItems(r.X_train, r.y_train)
        size = min(r.batch_size, len(items))
        order = torch.Generator().manual_seed(r.seed)
        loader = DataLoader(items, batch_size=size, shuffle=True, drop_last=True, generator=order)

        def per_item(seconds: float) -> None:
            items.work = seconds / size

        return _paced(_epochs(loader), multiple, per_item)

    return recipe.replace(loader=dataloader)


register(
    "starved_loader",
    "the data pipeline is the bottleneck: each step waits for its batch",
    Variant(
        "pause",
        "the loader pauses for every batch (a remote disk, a slow decode on the main thread)",
        "loader",
        _pause,
        Severity(5.0, 0.25, 50.0, "wait per batch, as a multiple of the run's compute per step"),
    ),
    Variant(
        "slow_dataset",
        "a torch `DataLoader` (no workers) over a `Dataset` whose `__getitem__` is slow",
        "loader",
        _slow_dataset,
        Severity(5.0, 0.25, 50.0, "work per batch, as a multiple of the run's compute per step"),
    ),
)

# -- too_small_model ------------------------------------------------------------------


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
register(
    "too_small_model",
    "the model is far too small for the task: too narrow somewhere to separate the classes",
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

# -- label_mismatch -------------------------------------------------------------------


def _shifted(recipe: Recipe, severity: float | None) -> Recipe:
    # A cyclic shift is a permutation with no fixed point for any class count >= 2.
    shifted = (recipe.y_train + 1) % recipe.n_classes
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
    recode = _by_appearance(recipe.y_val, recipe.n_classes)
    return recipe.replace(y_val=recode[recipe.y_val])


def _encoders_differ(recipe: Recipe) -> str:
    recode = _by_appearance(recipe.y_val, recipe.n_classes)
    if (recode == np.arange(recipe.n_classes)).all():
        return "the validation labels first appear in sorted order: both encoders agree"
    return ""


def _swapped(recipe: Recipe, severity: float | None) -> Recipe:
    swap = np.arange(recipe.n_classes)
    swap[[0, 1]] = [1, 0]
    return recipe.replace(y_train=swap[recipe.y_train])


register(
    "label_mismatch",
    "training labels use a class mapping that disagrees with the validation mapping",
    Variant(
        "shifted",
        "the training labels are off by one class (a 1-based class list read as 0-based)",
        "data",
        _shifted,
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
    ),
)

# -- softmax_before_loss --------------------------------------------------------------


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


register(
    "softmax_before_loss",
    "the loss is handed probabilities where it expects logits or log-probabilities",
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

# -- frozen_layer ---------------------------------------------------------------------


def _hidden_ids(model: nn.Module) -> set[int]:
    return {id(p) for p in model.get_submodule("hidden").parameters()}


def _left_out(recipe: Recipe, severity: float | None) -> Recipe:
    inner = recipe.param_groups

    def without_hidden(model: nn.Module, r: Recipe) -> list[dict[str, Any]]:
        frozen = _hidden_ids(model)
        groups = inner(model, r)
        return [{**g, "params": [p for p in g["params"] if id(p) not in frozen]} for g in groups]

    return recipe.replace(param_groups=without_hidden)


def _requires_grad(recipe: Recipe, severity: float | None) -> Recipe:
    inner = recipe.make_model

    def hidden_frozen(r: Recipe) -> nn.Module:
        model = inner(r)
        model.get_submodule("hidden").requires_grad_(False)
        return model

    return recipe.replace(make_model=hidden_frozen)


def _zero_lr(recipe: Recipe, severity: float | None) -> Recipe:
    inner = recipe.param_groups

    def hidden_at_rate_zero(model: nn.Module, r: Recipe) -> list[dict[str, Any]]:
        frozen = _hidden_ids(model)
        out = []
        for g in inner(model, r):
            rest = [p for p in g["params"] if id(p) not in frozen]
            held = [p for p in g["params"] if id(p) in frozen]
            out += [{**g, "params": rest}] if rest else []
            out += [{**g, "params": held, "lr": 0.0}] if held else []
        return out

    return recipe.replace(param_groups=hidden_at_rate_zero)


register(
    "frozen_layer",
    "a layer that should learn never changes: it is frozen by mistake",
    Variant(
        "left_out",
        "the hidden layer's parameters are not passed to the optimizer",
        "optimizer",
        _left_out,
    ),
    Variant(
        "requires_grad",
        "`requires_grad = False` on the hidden layer, left over from fine-tuning",
        "model",
        _requires_grad,
    ),
    Variant(
        "zero_lr",
        "the hidden layer sits in a parameter group whose learning rate is 0",
        "optimizer",
        _zero_lr,
    ),
)
