"""The decoder-only transformer a sequence task trains: small, causal, in plain PyTorch.

nanoGPT's model at a toy size: token and position embeddings, pre-norm blocks
of causal self-attention and an MLP, a final LayerNorm and an untied output
layer. It is an ``nn.Sequential`` named like every other model
(:mod:`faultbench.faults.architectures`): ``tokens`` (the embeddings), one
block per entry of ``Network.widths`` (``layer1``, ..., ``hidden``: the last),
``norm`` and ``output``, so the faults that pick a hidden layer pick a block.

:class:`SelfAttention` returns ``(output, weights)``, as
``nn.MultiheadAttention`` does: the Monitor reads the weights of any module
that returns them (:mod:`faultbench.training.attention`). Its ``causal`` flag
is where a missing mask lives.
"""

from __future__ import annotations

import math
from collections import OrderedDict

import torch
from torch import nn

MLP_RATIO = 4  # the MLP's hidden width, in multiples of the block's


class TokenPositions(nn.Module):
    """Token embedding plus a learned position embedding, for right-padded id rows."""

    def __init__(self, vocab: int, context: int, width: int) -> None:
        super().__init__()
        self.token = nn.Embedding(vocab, width)
        self.position = nn.Embedding(context, width)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.token(ids.long()) + self.position.weight[: ids.shape[-1]]


class SelfAttention(nn.Module):
    """Multi-head self-attention; causal unless ``causal`` is False. Returns (output, weights)."""

    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        if width % heads:
            raise ValueError(f"{heads} heads do not divide the width {width}")
        self.heads = heads
        self.causal = True  # position t attends to positions <= t only
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        n, t, width = x.shape
        q, k, v = self.qkv(x).view(n, t, 3, self.heads, width // self.heads).permute(2, 0, 3, 1, 4)
        scores = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(width // self.heads))
        if self.causal:
            future = torch.ones(t, t, dtype=torch.bool, device=x.device).triu(1)
            scores = scores.masked_fill(future, float("-inf"))
        weights = scores.softmax(-1)
        out = (weights @ v).transpose(1, 2).reshape(n, t, width)
        return self.proj(out), weights


class Block(nn.Module):
    """Pre-norm transformer block: ``x + attn(norm(x))``, then ``x + mlp(norm(x))``."""

    def __init__(self, width: int, heads: int, activation: type[nn.Module], dropout: float):
        super().__init__()
        self.attn_norm = nn.LayerNorm(width)
        self.attn = SelfAttention(width, heads)
        self.mlp_norm = nn.LayerNorm(width)
        self.fc = nn.Linear(width, MLP_RATIO * width)
        self.act = activation()
        self.mlp_out = nn.Linear(MLP_RATIO * width, width)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        attended, _ = self.attn(self.attn_norm(x))
        x = x + self.dropout(attended)
        return x + self.dropout(self.mlp_out(self.act(self.fc(self.mlp_norm(x)))))


def transformer(
    *,
    vocab: int,
    context: int,
    widths: tuple[int, ...],
    heads: int,
    activation: type[nn.Module],
    dropout: float,
    block_names: tuple[str, ...],
) -> nn.Sequential:
    """The model: ``len(widths)`` blocks of the width ``widths[0]``.

    Raises:
        ValueError: blocks of different widths (a residual stream has one width).
    """
    if len(set(widths)) != 1:
        raise ValueError(f"a transformer's blocks share one width; got {widths}")
    width = widths[0]
    layers: OrderedDict[str, nn.Module] = OrderedDict(tokens=TokenPositions(vocab, context, width))
    for name in block_names:
        layers[name] = Block(width, heads, activation, dropout)
    layers["norm"] = nn.LayerNorm(width)
    layers["output"] = nn.Linear(width, vocab)
    return nn.Sequential(layers)


def attention_modules(model: nn.Module) -> list[SelfAttention]:
    """The model's attention modules, first to last."""
    return [m for m in model.modules() if isinstance(m, SelfAttention)]
