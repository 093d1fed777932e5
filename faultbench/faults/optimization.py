"""The known faults of the optimization: the step, the rate, the parameter groups.

Each variant says in one line what the bug is, in a user's terms, and which part
of the recipe it lives in; :mod:`faultbench.faults.known` registers them under
their fault.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

from faultbench.faults.fault import Severity, Variant
from faultbench.faults.recipe import Recipe, steps_per_epoch

WARMUP_SHARE = 0.1  # share of the run a warm-up schedule spends reaching its peak


# -- missing_zero_grad ---------------------------------------------------------


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


MISSING_ZERO_GRAD: tuple[Variant, ...] = (
    Variant("never", "`optimizer.zero_grad()` is missing from the training loop", "step", _never),
    Variant(
        "per_epoch",
        "`zero_grad()` sits in the epoch loop, not the batch loop: cleared once per epoch",
        "step",
        _per_epoch,
    ),
)


# -- lr_too_high ---------------------------------------------------------------


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


LR_TOO_HIGH: tuple[Variant, ...] = (
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


# -- frozen_layer --------------------------------------------------------------


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


FROZEN_LAYER: tuple[Variant, ...] = (
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
