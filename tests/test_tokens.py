"""A sequence recipe's healthy parts: the token loss and greedy-decoding evaluation."""

from __future__ import annotations

import torch
from torch import nn

from faultbench.faults.recipe import base_setup
from faultbench.faults.tokens import SequenceScorer, greedy_exact_match, token_cross_entropy
from faultbench.tasks.sequences import IGNORE
from faultbench.tasks.task import get_task


class Oracle(nn.Module):
    """Knows every row of ``X``: at each position, the logit of the row's next token is 1
    (a prefix decides the row; rows that share their prompt share their answer here)."""

    def __init__(self, X: torch.Tensor, wrong_at: int | None = None) -> None:
        super().__init__()
        self.X, self.vocab, self.wrong_at = X, int(X.max()) + 1, wrong_at

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        t = ids.shape[1]
        nxt = torch.roll(self.X, -1, dims=1)[:, :t]
        if self.wrong_at is not None and self.wrong_at < t:
            nxt = nxt.clone()
            nxt[:, self.wrong_at] = (nxt[:, self.wrong_at] + 1) % self.vocab
        return 20.0 * nn.functional.one_hot(nxt, self.vocab).float()


def _rows() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    X = torch.tensor([[1, 3, 4, 5, 6, 2, 0], [1, 4, 5, 6, 2, 0, 0]])
    return X, torch.tensor([3, 3]), torch.tensor([6, 5])


def test_greedy_decoding_writes_the_answers_of_an_oracle() -> None:
    X, prompt, length = _rows()
    assert greedy_exact_match(Oracle(X), X, prompt, length, pad=0).tolist() == [True, True]


def test_one_wrong_answer_token_fails_the_exact_match() -> None:
    X, prompt, length = _rows()
    # Position 3 predicts token 4: the second answer token of row 0, the <eos> of row 1.
    got = greedy_exact_match(Oracle(X, wrong_at=3), X, prompt, length, pad=0)
    assert got.tolist() == [False, False]
    # Position 4 predicts row 0's <eos>, and comes after row 1's end.
    got = greedy_exact_match(Oracle(X, wrong_at=4), X, prompt, length, pad=0)
    assert got.tolist() == [False, True]


def test_the_token_loss_skips_ignored_labels() -> None:
    logits = torch.randn(2, 3, 5)
    labels = torch.tensor([[IGNORE, 1, 2], [IGNORE, IGNORE, 4]])
    expected = nn.functional.cross_entropy(logits[labels != IGNORE], labels[labels != IGNORE])
    assert torch.allclose(token_cross_entropy(logits, labels), expected)


def test_the_scorer_of_an_untrained_model() -> None:
    from faultbench.training.model import build_model

    recipe = base_setup(get_task("spelling"), 0)
    model = build_model(recipe).eval()
    scores = SequenceScorer(recipe)(model)
    assert set(scores) == {"train_acc", "val_acc", "val_loss", "val_token_acc"}
    assert scores["val_acc"] == 0.0 and scores["train_acc"] == 0.0  # no answer written yet
    assert 0.5 * 3.78 < scores["val_loss"] < 2 * 3.78  # near ln V = ln 44
    assert 0.0 <= scores["val_token_acc"] < 0.2
