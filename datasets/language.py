"""``language``: a held-out next-character task on text generated in code.

Sentences come from a small fixed grammar; each example is a window of
``CONTEXT`` characters and its label is the character that follows, so the
loss is next-token cross-entropy and ln(vocabulary) plays the role of ln C.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from faultbench.tasks.task import TASKS, Task, TrainDefaults

SEED = 31_337  # the generator's seed; part of the task's identity
# Characters of context per example, and updates per healthy run. The GRU's step
# is about ten times the digits MLP's, so this task was half of a cold `make
# report`'s training at 12 characters and 600 updates. At 8 and 400 a run costs
# 43% less CPU time, and healthy runs end where they did (validation accuracy
# 0.865-0.875 on seeds 0-2, against 0.867-0.879): chosen on cost and on healthy
# runs alone, as a task's recipe must be (no diagnoser was asked).
CONTEXT = 8
STEPS = 400
SENTENCES = 700
SUBJECTS = ("the cat", "a dog", "my friend", "the old man", "her sister", "a bird")
VERBS = ("sees", "likes", "follows", "paints", "finds", "calls")
OBJECTS = ("the moon", "a red ball", "the river", "his hat", "a small tree", "the door")
ENDINGS = (" today", " again", " at night", "", " slowly")


def corpus() -> str:
    """The generated text."""
    rng = np.random.Generator(np.random.PCG64(SEED))
    parts = []
    for _ in range(SENTENCES):
        words = [str(rng.choice(group)) for group in (SUBJECTS, VERBS, OBJECTS, ENDINGS)]
        parts.append(" ".join(words[:3]) + words[3] + ". ")
    return "".join(parts)


def language_arrays() -> tuple[np.ndarray, np.ndarray, tuple[str, ...]]:
    """(X, y, vocabulary): X holds token ids of each window, y the next token's id."""
    text = corpus()
    vocab = tuple(sorted(set(text)))
    ids = np.array([vocab.index(c) for c in text], dtype=np.int64)
    windows = np.lib.stride_tricks.sliding_window_view(ids[:-1], CONTEXT)
    X = windows[::3]  # a stride keeps the task small; windows still overlap
    y = ids[CONTEXT::3][: len(X)]
    return np.ascontiguousarray(X), y, vocab


@TASKS.register("language")
def build_language() -> Task:
    """Next-character prediction on generated sentences; a GRU reads the context.

    ``huge_inputs`` does not apply: the inputs are token ids (indices into an
    embedding), and scaling an index does not make an input larger, it makes
    it another token (or an invalid one).
    """
    X, y, vocab = language_arrays()
    task = Task.from_arrays(
        "language",
        X,
        y,
        normalize=False,
        defaults=TrainDefaults(architecture="gru", hidden=64, lr=3e-3, steps=STEPS),
    )
    # Labels are encoded in sorted order; they must be the token ids themselves.
    if task.classes != tuple(range(len(vocab))):
        raise RuntimeError("every character must occur as a next character")
    return replace(
        task,
        inapplicable={"huge_inputs": "inputs are token ids: scaling an index is not a huge input"},
    )
