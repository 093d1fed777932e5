"""The models a recipe can build: an MLP, a small CNN for images, a GRU for characters.

Every model names its layers the same way, so that faults and diagnosers
need no special case: ``hidden`` is the Linear layer before the last
activation, ``output`` the Linear layer that makes the logits; a deeper model
numbers the Linear layers before ``hidden`` as ``layer1``, ``layer2``, ...
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

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
    architecture: str,
    *,
    n_features: int,
    n_classes: int,
    widths: Sequence[int],
    image_side: int,
    channels: int = CNN_CHANNELS,
    activation: type[nn.Module] = nn.ReLU,
) -> OrderedDict[str, nn.Module]:
    """The layers of ``architecture`` up to and including the logits.

    Args:
        architecture: "mlp", "cnn" (reads square images) or "gru" (reads token ids).
        n_features: Input columns of a row.
        n_classes: Width of the output layer.
        widths: Widths of the fully connected layers before the output; the
            last one is ``hidden``.
        image_side: Side of the square images a "cnn" reads from each row.
        channels: Feature maps of the CNN's convolution.
        activation: The activation after each fully connected layer.

    Raises:
        ValueError: an unknown architecture, or no width.
    """
    if not widths:
        raise ValueError("a model needs at least one hidden width")
    layers, width = _front(architecture, n_features, n_classes, image_side, channels)
    act = activation.__name__.lower()
    names = [f"layer{i}" for i in range(1, len(widths))] + ["hidden"]
    for i, (name, out) in enumerate(zip(names, widths), start=1):
        layers[name] = nn.Linear(width, out)
        layers[act if name == "hidden" else f"{act}{i}"] = activation()
        width = out
    layers["output"] = nn.Linear(width, n_classes)
    return layers


def _front(
    architecture: str, n_features: int, n_classes: int, image_side: int, channels: int
) -> tuple[OrderedDict[str, nn.Module], int]:
    """The layers before the fully connected ones, and the width they output."""
    if architecture == "mlp":
        return OrderedDict(), n_features
    if architecture == "cnn":
        front = OrderedDict(
            image=nn.Unflatten(1, (1, image_side, image_side)),
            conv=nn.Conv2d(1, channels, kernel_size=3, padding=1),
            conv_relu=nn.ReLU(),
            pool=nn.MaxPool2d(2),
            flatten=nn.Flatten(),
        )
        return front, channels * (image_side // 2) ** 2
    if architecture == "gru":
        front = OrderedDict(
            tokens=Tokens(n_classes, GRU_EMBED), rnn=LastState(GRU_EMBED, GRU_STATE)
        )
        return front, GRU_STATE
    raise ValueError(f"unknown architecture {architecture!r}; expected one of {ARCHITECTURES}")
