"""Sequence tasks: prompt -> answer token sequences, padded, with the loss on answers only.

A classification task is rows of features and one label each. A sequence task
is rows of token ids (``Task.X_*``: ``(examples, context)`` int64, right-padded)
and, per position, the token the model must predict next (``Task.y_*``: the
same shape, :data:`IGNORE` where the loss must not count). What makes the rows
sequences is a :class:`Sequences` record on the task: the vocabulary, the
padding id, each example's prompt and full length, and the *source unit* each
example was generated from (the conversation, document or problem a split must
keep on one side, so that validation measures generalization, not recall).

:func:`next_token_labels` is the one place the labels are made: position ``t``
is trained to predict token ``t + 1``, and only the answer's tokens (its end
token included) count. The bugs of fine-tuning are changes to exactly this
(:mod:`faultbench.faults.language`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

IGNORE = -100  # the label of a position the loss skips (torch's cross_entropy default)
PAD, BOS, EOS = "<pad>", "<bos>", "<eos>"  # ids 0, 1, 2 of every shipped vocabulary
SPECIALS = (PAD, BOS, EOS)


@dataclass(frozen=True, eq=False)
class Sequences:
    """What makes a task's rows token sequences (see the module's docstring)."""

    vocab: tuple[str, ...]  # token strings by id; the specials first
    pad: int  # the padding id, after each sequence's end up to the context length
    prompt_train: np.ndarray  # per training example: tokens of its prompt (<bos> included)
    length_train: np.ndarray  # per training example: real tokens (prompt + answer + <eos>)
    units_train: np.ndarray  # per training example: the source unit it was generated from
    prompt_val: np.ndarray  # the same for the validation examples
    length_val: np.ndarray
    units_val: np.ndarray
    truncated: int = 0  # examples whose answer did not fit the context (cut; 0: none)

    @property
    def digest(self) -> str:
        """A hash of everything here: part of the task's fingerprint."""
        h = hashlib.sha256(repr((self.vocab, self.pad, self.truncated)).encode())
        for arr in (self.prompt_train, self.length_train, self.units_train):
            h.update(np.ascontiguousarray(arr).tobytes())
        for arr in (self.prompt_val, self.length_val, self.units_val):
            h.update(np.ascontiguousarray(arr).tobytes())
        return h.hexdigest()[:16]

    def replace(self, **changes: Any) -> Sequences:
        """A copy with some fields changed."""
        import dataclasses

        return dataclasses.replace(self, **changes)

    def decode(self, ids: Sequence[int] | np.ndarray) -> list[str]:
        """Token strings of ``ids``."""
        return [self.vocab[int(i)] for i in ids]


def next_token_labels(X: np.ndarray, prompt: np.ndarray, length: np.ndarray) -> np.ndarray:
    """Labels of right-padded sequences ``X``: position ``t`` predicts token ``t + 1``, and
    only the answer counts (positions ``prompt - 1`` to ``length - 2``); the rest are
    :data:`IGNORE`."""
    return labels_where(X, first=prompt - 1, stop=length - 1, shift=1)


def labels_where(X: np.ndarray, *, first: np.ndarray, stop: np.ndarray, shift: int) -> np.ndarray:
    """Labels that hold ``X[:, t + shift]`` at positions ``first <= t < stop`` (per row), and
    :data:`IGNORE` elsewhere (and where ``t + shift`` falls past the context)."""
    n, width = X.shape
    t = np.arange(width)[None, :]
    source = np.clip(t + shift, 0, width - 1)
    counted = (t >= first[:, None]) & (t < stop[:, None]) & (t + shift < width)
    labels = np.take_along_axis(X, np.broadcast_to(source, (n, width)), axis=1)
    return np.where(counted, labels, IGNORE).astype(np.int64)


def encode(
    examples: Sequence[tuple[Sequence[str], Sequence[str], int]],
    vocab: tuple[str, ...],
    context: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, int]:
    """Token ids of ``(prompt words, answer words, unit)`` examples, right-padded.

    Each row is ``<bos> prompt answer <eos> <pad>...``. Returns the ids
    ``(examples, context)``, the prompt and full lengths, the units, and how
    many examples were cut at ``context`` (their answer loses its end).

    Raises:
        ValueError: a word outside ``vocab``.
    """
    index = {w: i for i, w in enumerate(vocab)}
    pad = index[PAD]
    X = np.full((len(examples), context), pad, dtype=np.int64)
    prompts = np.zeros(len(examples), dtype=np.int64)
    lengths = np.zeros(len(examples), dtype=np.int64)
    units = np.zeros(len(examples), dtype=np.int64)
    cut = 0
    for row, (prompt, answer, unit) in enumerate(examples):
        words = [BOS, *prompt, *answer, EOS]
        missing = [w for w in words if w not in index]
        if missing:
            raise ValueError(f"words {missing[:3]} are not in the vocabulary")
        cut += len(words) > context
        ids = [index[w] for w in words[:context]]
        X[row, : len(ids)] = ids
        prompts[row], lengths[row], units[row] = 1 + len(prompt), len(ids), unit
    return X, prompts, lengths, units, cut


def split_by_unit(
    units: np.ndarray, *, val_fraction: float, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """Row indices (train, validation): whole units go to one side, a ``val_fraction`` share of
    the units to validation, drawn by ``seed``; each side in a random order (so the first
    rows are a sample of the task, as an evaluation of a few training rows needs)."""
    distinct = np.unique(units)
    rng = np.random.Generator(np.random.PCG64(seed))
    n_val = max(1, round(val_fraction * len(distinct)))
    held = set(rng.choice(distinct, size=n_val, replace=False).tolist())
    is_val = np.array([int(u) in held for u in units], dtype=bool)
    return rng.permutation(np.flatnonzero(~is_val)), rng.permutation(np.flatnonzero(is_val))
