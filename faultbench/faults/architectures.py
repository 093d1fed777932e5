"""The models a recipe can build: an MLP, a small CNN for images, a recurrent net or a
small causal transformer (:mod:`.transformer`) for tokens.

A :class:`Network` says what a practitioner chose (depth and widths, the
activation, normalization, dropout, initialization; the CNN's convolutions,
the recurrent cell), and :func:`build` turns it into an ``nn.Sequential``
whose layers are named the same way in every model, so that faults and
diagnosers need no special case: ``hidden`` is the last fully connected layer
before the output, ``output`` the layer that makes the logits, and the fully
connected layers before ``hidden`` are ``layer1``, ``layer2``, ...; each is
followed by its ``<name>_norm``, its activation and its ``<name>_dropout``.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Literal

import torch
from torch import nn

from faultbench.faults.transformer import transformer
from faultbench.tasks.design import ARCHITECTURES, CELLS, DOWNSAMPLES, INITS, NORMS, Network

__all__ = ["ACTIVATIONS", "Codes", "LastState", "Network", "Tokens", "TwoInputs", "build"]

#: The activation modules a network can use (a family draws all but sigmoid, the
#: held-out deep_sigmoid's).
ACTIVATIONS: dict[str, type[nn.Module]] = {
    "relu": nn.ReLU,
    "leaky_relu": nn.LeakyReLU,
    "gelu": nn.GELU,
    "silu": nn.SiLU,
    "tanh": nn.Tanh,
    "sigmoid": nn.Sigmoid,
}


class Tokens(nn.Module):
    """Embeds token ids that arrive as float columns (task arrays are float32)."""

    def __init__(self, vocab: int, width: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.embed(x.long())


class LastState(nn.Module):
    """A GRU or LSTM over the sequence; returns its final state."""

    def __init__(self, width: int, state: int, cell: str = "gru") -> None:
        super().__init__()
        self.gru = (nn.LSTM if cell == "lstm" else nn.GRU)(width, state, batch_first=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _, h = self.gru(x)
        if isinstance(h, tuple):  # an LSTM's (hidden, cell)
            h = h[0]
        return h[-1]


class Codes(nn.Module):
    """A model's second input: each categorical code column through its own embedding
    table, concatenated with the numeric columns (``forward(codes, numbers)``)."""

    def __init__(self, code_sizes: tuple[int, ...], width: int) -> None:
        super().__init__()
        self.tables = nn.ModuleList(nn.Embedding(size, width) for size in code_sizes)

    def forward(self, codes: torch.Tensor, numbers: torch.Tensor) -> torch.Tensor:
        embedded = [table(codes[:, i]) for i, table in enumerate(self.tables)]
        return torch.cat([*embedded, numbers], dim=1)


class TwoInputs(nn.Sequential):
    """An ``nn.Sequential`` whose first module takes the two inputs, ``model(codes, numbers)``:
    the layers keep the names and order every fault and diagnoser reads."""

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        first, *rest = list(self)
        x = first(*inputs)
        for module in rest:
            x = module(x)
        return x


def build(
    net: Network,
    *,
    n_features: int,
    n_outputs: int,
    image_side: int,
    code_sizes: tuple[int, ...] = (),
) -> nn.Sequential:
    """The model of ``net`` for inputs of ``n_features`` columns (and, for a ``tabular``
    network, categorical codes of ``code_sizes`` values each) and ``n_outputs`` outputs.

    Raises:
        ValueError: an unknown architecture, activation, normalization or init, or no width.
    """
    if not net.widths:
        raise ValueError("a model needs at least one hidden width")
    _check(net)
    if net.architecture == "transformer":  # n_features: the context; n_outputs: the vocabulary
        return transformer(
            vocab=n_outputs,
            context=n_features,
            widths=net.widths,
            heads=net.heads,
            activation=ACTIVATIONS[net.activation],
            dropout=net.dropout,
            block_names=net.hidden_names,
        )
    layers, width = _front(net, n_features, n_outputs, image_side, code_sizes)
    act = ACTIVATIONS[net.activation]
    act_name = act.__name__.lower()
    for i, (name, out) in enumerate(zip(net.hidden_names, net.widths), start=1):
        layers[name] = nn.Linear(width, out)
        if net.norm != "none":
            layers[f"{name}_norm"] = (
                nn.BatchNorm1d(out) if net.norm == "batch" else nn.LayerNorm(out)
            )
        layers[act_name if name == "hidden" else f"{act_name}{i}"] = act()
        if net.dropout > 0:
            layers[f"{name}_dropout"] = nn.Dropout(net.dropout)
        width = out
    layers["output"] = nn.Linear(width, n_outputs)
    model = TwoInputs(layers) if net.architecture == "tabular" else nn.Sequential(layers)
    _initialize(model, net.init, net.activation)
    return model


def _check(net: Network) -> None:
    for field, value, valid in (
        ("architecture", net.architecture, ARCHITECTURES),
        ("activation", net.activation, tuple(ACTIVATIONS)),
        ("norm", net.norm, NORMS),
        ("init", net.init, INITS),
        ("downsample", net.downsample, DOWNSAMPLES),
        ("cell", net.cell, CELLS),
    ):
        if value not in valid:
            raise ValueError(f"unknown {field} {value!r}; expected one of {valid}")


def _front(
    net: Network, n_features: int, n_outputs: int, image_side: int, code_sizes: tuple[int, ...]
) -> tuple[OrderedDict[str, nn.Module], int]:
    """The layers before the fully connected ones, and the width they output."""
    if net.architecture == "mlp":
        return OrderedDict(), n_features
    if net.architecture == "cnn":
        return _convolutions(net, image_side)
    if net.architecture == "tabular":
        if not code_sizes:
            raise ValueError("a tabular network needs categorical codes (code_sizes)")
        return OrderedDict(codes=Codes(code_sizes, net.embed)), n_features + len(
            code_sizes
        ) * net.embed
    front = OrderedDict(
        tokens=Tokens(n_outputs, net.embed), rnn=LastState(net.embed, net.state, net.cell)
    )
    return front, net.state


def _convolutions(net: Network, image_side: int) -> tuple[OrderedDict[str, nn.Module], int]:
    """3x3 convolutions, each followed by its norm, activation and a halving of the image."""
    front: OrderedDict[str, nn.Module] = OrderedDict(
        image=nn.Unflatten(1, (1, image_side, image_side))
    )
    act = ACTIVATIONS[net.activation]
    stride = 2 if net.downsample == "stride" else 1
    before, side = 1, image_side
    for j, out in enumerate(net.channels, start=1):
        name = "conv" if len(net.channels) == 1 else f"conv{j}"
        front[name] = nn.Conv2d(before, out, kernel_size=3, padding=1, stride=stride)
        if net.norm != "none":  # "layer" over a feature map: one group of every channel
            front[f"{name}_norm"] = (
                nn.BatchNorm2d(out) if net.norm == "batch" else nn.GroupNorm(1, out)
            )
        front[f"{name}_{act.__name__.lower()}"] = act()
        if stride == 1:
            front[f"{name}_pool"] = nn.MaxPool2d(2)
        before, side = out, (side + 1) // 2 if stride == 2 else side // 2
    front["flatten"] = nn.Flatten()
    return front, before * side * side


def _initialize(model: nn.Module, init: str, activation: str) -> None:
    """Re-initialize every linear and convolution weight as ``init`` says (biases to 0)."""
    if init == "default":
        return
    gain_of: Literal["relu", "linear"] = (
        "relu" if activation in ("relu", "leaky_relu") else "linear"
    )
    for module in model.modules():
        if not isinstance(module, (nn.Linear, nn.Conv2d)):
            continue
        if init == "kaiming":
            nn.init.kaiming_normal_(module.weight, nonlinearity=gain_of)
        elif init == "xavier":
            nn.init.xavier_uniform_(module.weight)
        else:
            nn.init.orthogonal_(module.weight)
        if module.bias is not None:
            nn.init.zeros_(module.bias)
