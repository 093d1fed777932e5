"""The known faults of the optimization: the step, the rate, the parameter groups.

Each variant says in one line what the bug is, in a user's terms, and which part
of the recipe it lives in; :mod:`faultbench.faults.known` registers them under
their fault.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.optim import lr_scheduler
from torch.optim.lr_scheduler import LRScheduler

from faultbench.faults.fault import Severity, Variant
from faultbench.faults.recipe import WARMUP_SHARE, Recipe, steps_per_epoch, warmup_then_cosine

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


ADAPTIVE = ("adam", "adamw", "rmsprop")  # optimizers that divide each step by the gradient's size


def _growth_felt(recipe: Recipe) -> str:
    """Where the summed gradients do not show, measured on the digits calibration bases
    (1000-1009, each trained as drawn, unclipped and with a constant rate): clipping bounds
    the summed gradient to a norm, so SGD trains as if with heavy momentum (base 1000
    clipped at 5: validation accuracy 0.955, the same base unclipped 0.212, healthy 0.964);
    an adaptive optimizer divides the sum by its own size and a decaying rate damps what
    is left (Adam or AdamW with cosine or warm-up-decay, unclipped, 4 bases: validation
    accuracy within 0.03 of healthy, 1 of 4 visible). A constant rate keeps the overshoot
    (Adam unclipped at a constant rate: 2 of 5 visible), so those designs keep the fault."""
    d = recipe.design
    if d.clip:
        return f"gradient clipping at norm {d.clip:g} bounds the gradients the loop sums"
    if d.optimizer in ADAPTIVE and d.schedule != "constant":
        return (
            f"{d.optimizer} divides the summed gradient by its own size and the {d.schedule} "
            "schedule damps what is left: the run trains as if healthy"
        )
    return ""


MISSING_ZERO_GRAD: tuple[Variant, ...] = (
    Variant(
        "never",
        "`optimizer.zero_grad()` is missing from the training loop",
        "step",
        _never,
        why_not=_growth_felt,
    ),
    Variant(
        "per_epoch",
        "`zero_grad()` sits in the epoch loop, not the batch loop: cleared once per epoch",
        "step",
        _per_epoch,
        why_not=_growth_felt,
    ),
)


# -- lr_too_high ---------------------------------------------------------------


def _constant(recipe: Recipe, severity: float | None) -> Recipe:
    return recipe.replace(lr=recipe.lr * float(severity or 1.0))


def _warmup(recipe: Recipe, severity: float | None) -> Recipe:
    peak, total = float(severity or 1.0), recipe.steps
    warm = max(1, round(WARMUP_SHARE * total))

    def too_high_peak(optimizer: torch.optim.Optimizer, r: Recipe) -> LRScheduler:
        # The user's schedule, written with its peak far above the working rate.
        return lr_scheduler.LambdaLR(
            optimizer, lambda step: peak * warmup_then_cosine(step, warm=warm, total=total)
        )

    return recipe.replace(make_schedule=too_high_peak)


def _sgd_only(recipe: Recipe) -> str:
    if recipe.design.optimizer == "sgd":
        return ""
    return f"the run trains with {recipe.design.optimizer}, not SGD with momentum"


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


def _hidden_ids(model: nn.Module, recipe: Recipe) -> set[int]:
    return {id(p) for p in model.get_submodule(recipe.pick_hidden("frozen_layer")).parameters()}


def _left_out(recipe: Recipe, severity: float | None) -> Recipe:
    inner = recipe.param_groups

    def without_hidden(model: nn.Module, r: Recipe) -> list[dict[str, Any]]:
        frozen = _hidden_ids(model, r)
        groups = inner(model, r)
        return [{**g, "params": [p for p in g["params"] if id(p) not in frozen]} for g in groups]

    return recipe.replace(param_groups=without_hidden)


def _requires_grad(recipe: Recipe, severity: float | None) -> Recipe:
    inner = recipe.make_model

    def hidden_frozen(r: Recipe) -> nn.Module:
        model = inner(r)
        model.get_submodule(r.pick_hidden("frozen_layer")).requires_grad_(False)
        return model

    return recipe.replace(make_model=hidden_frozen)


def _zero_lr(recipe: Recipe, severity: float | None) -> Recipe:
    inner = recipe.param_groups

    def hidden_at_rate_zero(model: nn.Module, r: Recipe) -> list[dict[str, Any]]:
        frozen = _hidden_ids(model, r)
        out = []
        for g in inner(model, r):
            rest = [p for p in g["params"] if id(p) not in frozen]
            held = [p for p in g["params"] if id(p) in frozen]
            out += [{**g, "params": rest}] if rest else []
            out += [{**g, "params": held, "lr": 0.0}] if held else []
        return out

    return recipe.replace(param_groups=hidden_at_rate_zero)


def _frozen_embedding(recipe: Recipe, severity: float | None) -> Recipe:
    inner = recipe.make_model

    def embedding_frozen(r: Recipe) -> nn.Module:
        model = inner(r)
        next(m for m in model.modules() if isinstance(m, nn.Embedding)).requires_grad_(False)
        return model

    return recipe.replace(make_model=embedding_frozen)


def _reads_tokens(recipe: Recipe) -> str:
    if recipe.architecture in ("gru", "transformer"):
        return ""
    if recipe.code_sizes:
        return "its embeddings hold categorical codes, not tokens: frozen_layer.code_table"
    return "the model reads features, not token ids: it has no embedding"


def _largest_table(model: nn.Module) -> nn.Embedding:
    """The embedding table of the code with the most values (the first of equals): a
    recommender's users or items, the table that carries most of what the codes say."""
    codes = model.get_submodule("codes")  # faultbench.faults.architectures.Codes
    tables = [m for m in codes.modules() if isinstance(m, nn.Embedding)]
    return max(tables, key=lambda table: table.num_embeddings)


def _table_left_out(recipe: Recipe, severity: float | None) -> Recipe:
    inner = recipe.param_groups

    def without_table(model: nn.Module, r: Recipe) -> list[dict[str, Any]]:
        frozen = {id(p) for p in _largest_table(model).parameters()}
        groups = inner(model, r)
        return [{**g, "params": [p for p in g["params"] if id(p) not in frozen]} for g in groups]

    return recipe.replace(param_groups=without_table)


def _reads_codes(recipe: Recipe) -> str:
    if recipe.code_sizes:
        return ""
    return "the model takes no categorical codes: it has no embedding table of them"


FROZEN_LAYER: tuple[Variant, ...] = (
    Variant(
        "left_out",
        "a hidden layer's parameters are not passed to the optimizer",
        "optimizer",
        _left_out,
    ),
    Variant(
        "requires_grad",
        "`requires_grad = False` on a hidden layer, left over from fine-tuning",
        "model",
        _requires_grad,
    ),
    Variant(
        "zero_lr",
        "a hidden layer sits in a parameter group whose learning rate is 0",
        "optimizer",
        _zero_lr,
    ),
    Variant(
        "embedding",
        "the token embedding is frozen (`requires_grad = False`), kept from a first stage",
        "model",
        _frozen_embedding,
        why_not=_reads_tokens,
    ),
    Variant(
        "code_table",
        "a categorical feature's embedding table is not passed to the optimizer",
        "optimizer",
        _table_left_out,
        why_not=_reads_codes,
    ),
)
