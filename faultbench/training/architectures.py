"""Model recipes beyond the MLP: a small CNN for images, a GRU for characters.

Every recipe names its layers the same way, so that faults and diagnosers
need no special case: ``hidden`` is the Linear layer before the last ReLU
(frozen by ``frozen_layer``, killed by ``dead_units``, narrowed by
``too_small_model``), ``output`` the Linear layer that makes the logits.
"""

from __future__ import annotations

from collections import OrderedDict

import torch
from torch import nn

ARCHITECTURES = ("mlp", "cnn", "gru")
CNN_CHANNELS = 8  # feature maps of the CNN's one convolution
GRU_EMBED = 16  # character embedding width
GRU_STATE = 48  # recurrent state width


class Tokens(nn.Module):
    """Embeds token ids that arrive as float columns (task arrays are float32)."""

    def __init__(self, vocab: int, width: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.embed(x.long())


class LastState(nn.Module):
    """A GRU over the sequence; returns its final state."""

    def __init__(self, width: int, state: int) -> None:
        super().__init__()
        self.gru = nn.GRU(width, state, batch_first=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _, h = self.gru(x)
        return h[-1]


def body(
    architecture: str, *, n_features: int, n_classes: int, hidden: int, image_side: int
) -> OrderedDict[str, nn.Module]:
    """The layers of ``architecture`` up to and including the logits."""
    if architecture == "mlp":
        front: OrderedDict[str, nn.Module] = OrderedDict()
        width = n_features
    elif architecture == "cnn":
        front = OrderedDict(
            image=nn.Unflatten(1, (1, image_side, image_side)),
            conv=nn.Conv2d(1, CNN_CHANNELS, kernel_size=3, padding=1),
            conv_relu=nn.ReLU(),
            pool=nn.MaxPool2d(2),
            flatten=nn.Flatten(),
        )
        width = CNN_CHANNELS * (image_side // 2) ** 2
    elif architecture == "gru":
        front = OrderedDict(
            tokens=Tokens(n_classes, GRU_EMBED), rnn=LastState(GRU_EMBED, GRU_STATE)
        )
        width = GRU_STATE
    else:
        raise ValueError(f"unknown architecture {architecture!r}; expected one of {ARCHITECTURES}")
    return OrderedDict(
        **front,
        hidden=nn.Linear(width, hidden),
        relu=nn.ReLU(),
        output=nn.Linear(hidden, n_classes),
    )
