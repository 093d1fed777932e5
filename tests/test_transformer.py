"""The small causal transformer: causal unless its mask is taken away, weights returned."""

from __future__ import annotations

import torch
from torch import nn

from faultbench.faults.transformer import SelfAttention, attention_modules, transformer


def _model() -> nn.Sequential:
    torch.manual_seed(0)
    return transformer(
        vocab=11,
        context=7,
        widths=(16, 16),
        heads=2,
        activation=nn.GELU,
        dropout=0.0,
        block_names=("layer1", "hidden"),
    ).eval()


def test_a_later_token_never_changes_an_earlier_positions_logits() -> None:
    model = _model()
    ids = torch.randint(0, 11, (3, 7), generator=torch.Generator().manual_seed(1))
    changed = ids.clone()
    changed[:, 4:] = (changed[:, 4:] + 1) % 11
    a, b = model(ids), model(changed)
    assert torch.equal(a[:, :4], b[:, :4]) and not torch.allclose(a[:, 4:], b[:, 4:])
    for attention in attention_modules(model):
        attention.causal = False  # the causal_mask_missing fault
    assert not torch.allclose(model(ids)[:, :4], model(changed)[:, :4])


def test_attention_returns_row_stochastic_causal_weights() -> None:
    attention = SelfAttention(8, 2)
    out, weights = attention(torch.randn(2, 5, 8))
    assert out.shape == (2, 5, 8) and weights.shape == (2, 2, 5, 5)
    assert torch.allclose(weights.sum(-1), torch.ones(2, 2, 5))
    assert (weights.triu(1) == 0).all()


def test_names_follow_the_other_models() -> None:
    names = dict(_model().named_children())
    assert list(names) == ["tokens", "layer1", "hidden", "norm", "output"]
