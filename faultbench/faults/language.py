"""The bugs of training a language model, each a variant wrapping the part where it lives.

The labels a sequence recipe trains on are made in one place
(:func:`faultbench.tasks.sequences.next_token_labels`: position ``t`` predicts
token ``t + 1``, the answer's tokens only); most of these bugs are that function
written differently, in the collate step both splits go through. The others
live in the model (the causal mask), the loss (how micro-batches are
normalized), the optimizer's checkpoint and the split.
:mod:`faultbench.faults.known` registers them under their labels.

Every variant says why it cannot apply to a run that is not a sequence task's
(its targets are class labels or values, not next tokens), and is never skipped silently.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from faultbench.faults.fault import Severity, Variant
from faultbench.faults.recipe import Recipe, Schedule
from faultbench.faults.transformer import attention_modules
from faultbench.tasks.sequences import IGNORE, SPECIALS, labels_where


def _sequences_only(recipe: Recipe) -> str:
    if recipe.sequences is not None:
        return ""
    kind = recipe.kind.summary
    return f"the task is not a sequence task: its targets are {kind}, not next tokens"


def _relabelled(recipe: Recipe, labels: Callable[[np.ndarray, Any, str], np.ndarray]) -> Recipe:
    """Both splits' labels remade by ``labels(X, sequences, split)``."""
    seq = recipe.sequences
    assert seq is not None
    return recipe.replace(
        y_train=labels(recipe.X_train, seq, "train"), y_val=labels(recipe.X_val, seq, "val")
    )


def _bounds(seq: Any, split: str) -> tuple[np.ndarray, np.ndarray]:
    return getattr(seq, f"prompt_{split}"), getattr(seq, f"length_{split}")


# -- labels_not_shifted ----------------------------------------------------------


def _unshifted(recipe: Recipe, severity: float | None) -> Recipe:
    def labels(X: np.ndarray, seq: Any, split: str) -> np.ndarray:
        prompt, length = _bounds(seq, split)
        # The answer's own positions, each labelled with its own token: `labels = input_ids`
        # masked to the answer, and never shifted (the loss does not shift either).
        return labels_where(X, first=prompt, stop=length, shift=0)

    return _relabelled(recipe, labels)


LABELS_NOT_SHIFTED: tuple[Variant, ...] = (
    Variant(
        "unshifted",
        "the labels are the input ids at the same positions: trained to copy the current token",
        "data",
        _unshifted,
        why_not=_sequences_only,
    ),
)


# -- causal_mask_missing ---------------------------------------------------------


def _no_mask(recipe: Recipe, severity: float | None) -> Recipe:
    inner = recipe.make_model

    def unmasked(r: Recipe) -> nn.Module:
        model = inner(r)
        for attention in attention_modules(model):
            attention.causal = False  # e.g. `is_causal=True` left out of the attention call
        return model

    return recipe.replace(make_model=unmasked)


def _transformer_only(recipe: Recipe) -> str:
    if recipe.architecture == "transformer":
        return ""
    return f"the model is a {recipe.architecture}: it has no attention to mask"


CAUSAL_MASK_MISSING: tuple[Variant, ...] = (
    Variant(
        "no_mask",
        "self-attention is built without its causal mask: each position sees the tokens after it",
        "model",
        _no_mask,
        why_not=_transformer_only,
    ),
)


# -- unmasked_loss ---------------------------------------------------------------


def _padding_counted(recipe: Recipe, severity: float | None) -> Recipe:
    def labels(X: np.ndarray, seq: Any, split: str) -> np.ndarray:
        prompt, _ = _bounds(seq, split)
        # The pad ids never replaced by -100: every position after the prompt counts.
        return labels_where(X, first=prompt - 1, stop=np.full_like(prompt, X.shape[1]), shift=1)

    return _relabelled(recipe, labels)


def _prompt_counted(recipe: Recipe, severity: float | None) -> Recipe:
    def labels(X: np.ndarray, seq: Any, split: str) -> np.ndarray:
        _, length = _bounds(seq, split)
        # The prompt is never masked: the instruction and the question count as the answer does.
        return labels_where(X, first=np.zeros_like(length), stop=length - 1, shift=1)

    return _relabelled(recipe, labels)


UNMASKED_LOSS: tuple[Variant, ...] = (
    Variant(
        "padding",
        "the padding's labels keep the pad id instead of -100: padding counts in the loss",
        "data",
        _padding_counted,
        why_not=_sequences_only,
    ),
    Variant(
        "prompt",
        "the prompt's labels are not set to -100: the instruction and question count in the loss",
        "data",
        _prompt_counted,
        why_not=_sequences_only,
    ),
)


# -- loss_normalization ----------------------------------------------------------


def micro_batch_loss(
    logits: torch.Tensor,
    labels: torch.Tensor,
    *,
    parts: int = 1,
    small: int = 0,
    divide: bool,
) -> torch.Tensor:
    """The loss of a batch accumulated over micro-batches, each micro-batch's loss its mean
    over its own counted tokens: averaged over the micro-batches (``divide``) or summed (the
    division forgotten). The micro-batches: ``small`` examples then the rest, or else
    ``parts`` as even as they come, of whatever batch the loss is given.

    One forward of the whole batch, then the micro-batches' losses: the same gradient as a
    backward pass per micro-batch (the model has no batch statistics), the same loss logged.
    """
    n = len(labels)
    sizes = (small, n - small) if 0 < small < n else _sizes(n, parts)
    parts_of = torch.split(torch.arange(n, device=labels.device), list(sizes))
    losses = torch.stack(
        [
            F.cross_entropy(logits[part].reshape(-1, logits.shape[-1]), labels[part].reshape(-1))
            for part in parts_of
        ]
    )
    return losses.mean() if divide else losses.sum()


def _sizes(batch: int, parts: int) -> tuple[int, ...]:
    """``batch`` examples in ``parts`` micro-batches as even as they come."""
    parts = max(1, min(parts, batch))
    return tuple(len(p) for p in np.array_split(np.arange(batch), parts))


def _undivided(recipe: Recipe, severity: float | None) -> Recipe:
    parts = int(severity or 1)
    return recipe.replace(loss=functools.partial(micro_batch_loss, parts=parts, divide=False))


def _per_batch_mean(recipe: Recipe, severity: float | None) -> Recipe:
    # The batch is accumulated over two micro-batches of uneven size (the epoch's last,
    # partial one; a length bucket of few sequences): `severity` examples, then the rest,
    # each averaged over its own tokens, then the two averaged, so the small one's few
    # tokens weigh as much as all the others.
    small = int(severity or 1)
    return recipe.replace(loss=functools.partial(micro_batch_loss, small=small, divide=True))


def _accumulable(recipe: Recipe) -> str:
    return _sequences_only(recipe) or (
        "" if recipe.batch_size >= 4 else "a batch of fewer than 4 examples is not accumulated"
    )


LOSS_NORMALIZATION: tuple[Variant, ...] = (
    Variant(
        "undivided_accumulation",
        "gradients accumulated over micro-batches without dividing each micro-batch's loss",
        "loss",
        _undivided,
        Severity(4.0, 2.0, 16.0, "micro-batches summed into one update"),
        why_not=_accumulable,
    ),
    Variant(
        "per_batch_mean",
        "micro-batches of uneven size each averaged over their own tokens, then averaged",
        "loss",
        _per_batch_mean,
        Severity(1.0, 1.0, 8.0, "examples in the small micro-batch (smaller is worse)", False),
        why_not=_accumulable,
    ),
)


# -- resume_without_state --------------------------------------------------------


class _ResumedWithoutState:
    """The run's schedule, through ``resumes`` restarts from a checkpoint that kept the model
    and the progress but not the optimizer's state nor the schedule's: at each, the
    optimizer's moments are empty and the schedule is built again from its first step."""

    def __init__(
        self,
        make: Callable[[torch.optim.Optimizer, Recipe], Schedule],
        optimizer: torch.optim.Optimizer,
        recipe: Recipe,
        resumes: int,
    ) -> None:
        self.make, self.optimizer, self.recipe = make, optimizer, recipe
        self.inner = make(optimizer, recipe)
        self.every = max(1, recipe.steps // (resumes + 1))
        self.done = 0

    def step(self) -> None:
        self.inner.step()
        self.done += 1
        if self.done % self.every == 0 and self.done < self.recipe.steps:
            # `model.load_state_dict(ck["model"])` only: a fresh optimizer and scheduler.
            self.optimizer.state.clear()
            self.inner = self.make(self.optimizer, self.recipe)


def _resumable(recipe: Recipe) -> str:
    if recipe.sequences is None:
        return (
            "run on sequence tasks only: the manifestation signal that shows it (the rate's "
            "restarts) is read on sequence runs, not on a classifier's or a regression's"
        )
    # A constant rate's schedule rebuilt is the same schedule: only the optimizer's moments
    # start over, which it rebuilds in a few steps; the fault applies and may leave no trace
    # (the report then says "no visible effect").
    return ""


def _fresh_optimizer(recipe: Recipe, severity: float | None) -> Recipe:
    inner, resumes = recipe.make_schedule, int(severity or 1)

    def resumed(optimizer: torch.optim.Optimizer, r: Recipe) -> Schedule:
        return _ResumedWithoutState(inner, optimizer, r, resumes)

    return recipe.replace(make_schedule=resumed)


RESUME_WITHOUT_STATE: tuple[Variant, ...] = (
    Variant(
        "fresh_optimizer",
        "resumed from checkpoints of the model alone: the optimizer and schedule start afresh",
        "optimizer",
        _fresh_optimizer,
        Severity(4.0, 1.0, 9.0, "resumes in the run, evenly spaced"),
        why_not=_resumable,
    ),
)


# -- leaky_split -----------------------------------------------------------------


def _by_example(recipe: Recipe, severity: float | None) -> Recipe:
    seq = recipe.sequences
    assert seq is not None
    X = np.concatenate([recipe.X_train, recipe.X_val])
    y = np.concatenate([recipe.y_train, recipe.y_val])
    fields = {
        name: np.concatenate([getattr(seq, f"{name}_train"), getattr(seq, f"{name}_val")])
        for name in ("prompt", "length", "units")
    }
    # `train_test_split(examples)`: rows drawn at random, whatever unit they came from.
    order = recipe.rng("leaky_split").permutation(len(X))
    val, train = order[: len(recipe.X_val)], order[len(recipe.X_val) :]
    split = {f"{k}_{side}": v[rows] for k, v in fields.items() for side, rows in _sides(train, val)}
    return recipe.replace(
        X_train=X[train],
        y_train=y[train],
        X_val=X[val],
        y_val=y[val],
        sequences=seq.replace(**split),
    )


def _sides(train: np.ndarray, val: np.ndarray) -> tuple[tuple[str, np.ndarray], ...]:
    return (("train", train), ("val", val))


def _units_shared(recipe: Recipe) -> str:
    why = _sequences_only(recipe)
    if why:
        return "examples carry no source unit (a sequence task's conversation or document)"
    assert recipe.sequences is not None
    units = np.concatenate([recipe.sequences.units_train, recipe.sequences.units_val])
    if len(np.unique(units)) == len(units):
        return "every source unit holds one example: an example split is a unit split"
    return ""


LEAKY_SPLIT: tuple[Variant, ...] = (
    Variant(
        "by_example",
        "training and validation split by example: a conversation's examples land on both sides",
        "data",
        _by_example,
        why_not=_units_shared,
    ),
)


# -- label_mismatch: the vocabulary --------------------------------------------------


def appearance_order(X: np.ndarray, n_vocab: int) -> np.ndarray:
    """For each token id, the id a vocabulary built from ``X`` in order of first appearance
    gives it (the specials keep theirs; tokens ``X`` lacks go last, in order)."""
    specials = len(SPECIALS)
    seen = list(dict.fromkeys(int(t) for t in X.reshape(-1) if int(t) >= specials))
    order = seen + [t for t in range(specials, n_vocab) if t not in set(seen)]
    recode = np.arange(n_vocab)
    recode[order] = np.arange(specials, n_vocab)
    return recode


def _two_vocabularies(recipe: Recipe, severity: float | None) -> Recipe:
    recode = appearance_order(recipe.X_val, recipe.n_outputs)
    y = recipe.y_val
    y_val = np.where(y == IGNORE, IGNORE, recode[np.where(y == IGNORE, 0, y)])
    return recipe.replace(X_val=recode[recipe.X_val], y_val=y_val.astype(np.int64))


def _vocabularies_differ(recipe: Recipe) -> str:
    why = _sequences_only(recipe)
    if why:
        return why
    recode = appearance_order(recipe.X_val, recipe.n_outputs)
    if (recode == np.arange(recipe.n_outputs)).all():
        return "the validation tokens first appear in vocabulary order: both vocabularies agree"
    return ""


TWO_VOCABULARIES = Variant(
    "vocabulary",
    "the validation text is tokenized with a vocabulary built anew, in another order",
    "data",
    _two_vocabularies,
    why_not=_vocabularies_differ,
)
