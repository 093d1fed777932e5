"""The healthy parts of a sequence task's recipe: the token loss and the evaluation.

- :func:`token_cross_entropy` is the loss: cross-entropy of ``(N, T, V)``
  logits against ``(N, T)`` labels, averaged over the counted tokens only
  (labels equal to :data:`~faultbench.tasks.sequences.IGNORE` do not count):
  per-token normalization, so a batch of long answers and one of short
  answers weigh each token alike.
- :class:`SequenceScorer` is the evaluation: the answer's exact match by
  greedy decoding from the prompt (the task's accuracy: ``val_acc`` and
  ``train_acc``, each on a sample), and, teacher-forced over a larger sample
  of the validation labels, the token accuracy and the loss.

Both are module-level and plain, so a probe that carries the loss pickles.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from faultbench.tasks.sequences import IGNORE

# Examples decoded at each evaluation: decoding is most of a run's cost (an answer of k
# tokens takes k forward passes over every row), so the exact match is measured on a sample
# (the rows are in a random order: the first are a sample), and so are the token accuracy
# and loss. Halved from 64/256 and every validation example when the evaluations were half
# of a run's CPU time, and the two tasks' runs most of a cold report's.
TRAIN_DECODE_SAMPLE = 32
VAL_DECODE_SAMPLE = 128
VAL_TOKEN_SAMPLE = 256


def token_cross_entropy(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy over the counted tokens of ``(N, T, V)`` logits, ``(N, T)`` labels."""
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1))


def greedy_exact_match(
    model: nn.Module, X: torch.Tensor, prompt: torch.Tensor, length: torch.Tensor, pad: int
) -> torch.Tensor:
    """Per row of right-padded ``X``: whether greedy decoding from its prompt writes its
    answer (every token up to and including the end token) exactly.

    Each step feeds every row its prompt and the tokens generated so far (padding
    after them, up to the longest row still writing), and appends the argmax of the
    logits at each row's last written position.
    """
    n, width = X.shape
    rows = torch.arange(n)
    ids = X.masked_fill(torch.arange(width)[None, :] >= prompt[:, None], pad)
    for k in range(int((length - prompt).max()) if n else 0):
        at = prompt + k  # the position each row writes now
        live = at < length
        if not bool(live.any()):
            break
        logits = model(ids[:, : int(at[live].max())])
        chosen = logits[rows[live], at[live] - 1].argmax(-1)
        ids[rows[live], at[live]] = chosen
    return (ids == X).all(dim=1)


class SequenceScorer:
    """The evaluation of a sequence task, its data prepared once (see the module's docstring)."""

    def __init__(self, recipe: Any) -> None:  # a Recipe (recipe.py imports this module)
        seq = recipe.sequences
        assert seq is not None, "a sequence scorer needs a sequence task"
        n, v = min(TRAIN_DECODE_SAMPLE, len(recipe.y_train)), VAL_DECODE_SAMPLE
        self.n_train, self.pad = n, seq.pad
        self.X = torch.from_numpy(np.concatenate([recipe.X_train[:n], recipe.X_val[:v]]))
        self.prompt = torch.from_numpy(np.concatenate([seq.prompt_train[:n], seq.prompt_val[:v]]))
        self.length = torch.from_numpy(np.concatenate([seq.length_train[:n], seq.length_val[:v]]))
        self.X_val = torch.from_numpy(recipe.X_val[:VAL_TOKEN_SAMPLE])
        self.y_val = torch.from_numpy(recipe.y_val[:VAL_TOKEN_SAMPLE])

    @torch.inference_mode()
    def __call__(self, model: nn.Module) -> dict[str, float]:
        """Score ``model`` as it is (put it in eval mode first)."""
        exact = greedy_exact_match(model, self.X, self.prompt, self.length, self.pad).numpy()
        n = self.n_train
        scores = {
            "train_acc": float(exact[:n].mean()) if n else float("nan"),
            "val_acc": float(exact[n:].mean()) if len(exact) > n else float("nan"),
            "val_loss": float("nan"),
            "val_token_acc": float("nan"),
        }
        counted = self.y_val != IGNORE
        if bool(counted.any()):
            logits = model(self.X_val)[counted]
            targets = self.y_val[counted]
            scores["val_loss"] = float(F.cross_entropy(logits, targets))
            scores["val_token_acc"] = float((logits.argmax(-1) == targets).double().mean())
        return scores


def sequence_scorer(recipe: Any) -> SequenceScorer:
    """The evaluation part of a sequence recipe."""
    return SequenceScorer(recipe)
