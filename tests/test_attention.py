"""The Monitor's attention statistics: entropy and the share of weight on later positions."""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn

from faultbench.faults.transformer import SelfAttention
from faultbench.training.attention import (
    AttentionWatch,
    _Watched,
    attention_weights,
    is_attention,
)
from faultbench.training.monitor import Monitor


class Wrapped(nn.Module):
    """A model around ``nn.MultiheadAttention``, with or without a causal mask."""

    def __init__(self, causal: bool) -> None:
        super().__init__()
        self.attn = nn.MultiheadAttention(8, 2, batch_first=True)
        self.head = nn.Linear(8, 3)
        self.causal = causal

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t = x.shape[1]
        mask = torch.ones(t, t, dtype=torch.bool).triu(1) if self.causal else None
        out, _ = self.attn(x, x, x, attn_mask=mask)
        return self.head(out)


def test_attention_modules_are_found_by_kind_and_name() -> None:
    assert is_attention(nn.MultiheadAttention(4, 1)) and is_attention(SelfAttention(4, 1))
    assert not is_attention(nn.Linear(2, 2))
    assert attention_weights((torch.zeros(1), None)) is None
    assert attention_weights((torch.zeros(1), torch.ones(2, 3, 3))) is not None


def test_entropy_and_future_share_of_known_weights() -> None:
    assert AttentionWatch(nn.Sequential(nn.Linear(2, 2))).watched == {}
    one = _Watched()
    # Two rows of 2 keys: row 0 all on key 0, row 1 half and half.
    weights = torch.tensor([[[1.0, 0.0], [0.5, 0.5]]])
    one.note(weights)
    one.note(torch.tensor([[[0.5, 0.5], [0.5, 0.5]]]))  # row 0 puts 0.5 on a later key
    rows = one.log.read()
    assert rows[0, 0] == np.float64(np.float32(math.log(2) / 2))
    assert rows[0, 1] == 0.0
    assert abs(rows[1, 0] - math.log(2)) < 1e-6 and rows[1, 1] == 0.25


def test_a_causal_model_puts_nothing_ahead_and_an_unmasked_one_does() -> None:
    for causal, ahead in ((True, False), (False, True)):
        torch.manual_seed(0)
        model = Wrapped(causal)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        monitor = Monitor(model, optimizer, every=2)
        for _ in range(4):
            x = torch.randn(4, 5, 8)
            loss = model(x).pow(2).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            monitor.step(loss)
        trace = monitor.trace()
        future, entropy = trace.attention_future["attn"], trace.attention_entropy["attn"]
        assert len(future) == len(trace.stat_steps) == 2  # recorded steps only
        assert bool((future > 0.1).all()) is ahead and bool((future == 0).all()) is not ahead
        assert ((entropy > 0) & (entropy <= math.log(5))).all()
        monitor.close()
        assert not model.attn._forward_hooks
