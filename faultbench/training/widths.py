"""How wide a model's layers are and how many classes it scores, from its first forward."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import torch
from torch import nn

from faultbench.training.hooks import Hook

CHANNELS_FIRST = (
    nn.Conv1d,
    nn.Conv2d,
    nn.Conv3d,
    nn.ConvTranspose1d,
    nn.ConvTranspose2d,
    nn.ConvTranspose3d,
)
LOOKUPS = (nn.Embedding, nn.EmbeddingBag)  # tables: their width is how the input is represented


class FirstForward:
    """One-shot forward hooks: what the model outputs, and each layer's widths,
    on the first training forward. Removed once the model's forward returns.

    A layer's width is its output's last dimension, or its channels (dimension
    1, or 0 unbatched) for a convolution. Only layers that mix features set a
    width: those with a parameter of two or more dimensions, lookups
    (``nn.Embedding``) excepted, whose width is how the input is represented.
    Normalization layers, biases and per-channel scales keep the width they get.
    """

    def __init__(self, model: nn.Module) -> None:
        self.output: torch.Tensor | None = None  # the model's first output (see model_output)
        self.widths: list[int] = []  # the first layer's input, then each layer's output
        self._seen: set[int] = set()  # layers whose width is known
        self._handles = [model.register_forward_hook(Hook(self._top))]
        for module in model.modules():
            # The model itself is no layer unless it is one: a parameter of its own beside
            # its children (a learned position embedding added to the tokens') would give it
            # the width of the model's output, read as a hidden layer.
            if module is model and next(model.children(), None) is not None:
                continue
            if _mixes_features(module):
                self._handles.append(module.register_forward_hook(Hook(self._layer)))

    def _layer(self, module: nn.Module, args: Any, out: Any) -> None:
        if not module.training or id(module) in self._seen:
            return
        self._seen.add(id(module))
        if not self.widths:
            first_input = _first_tensor(args)
            if first_input is not None:
                self.widths.append(_width(module, first_input))
        first_out = _first_tensor(out)
        if first_out is not None:
            self.widths.append(_width(module, first_out))

    def _top(self, module: nn.Module, _args: Any, out: Any) -> None:
        if module.training:
            self.output = model_output(out)
            self.close()

    @property
    def done(self) -> bool:
        """Whether the first training forward has been seen."""
        return not self._handles

    def close(self) -> None:
        """Remove the hooks that are left."""
        for handle in self._handles:
            handle.remove()
        self._handles = []


def _mixes_features(module: nn.Module) -> bool:
    if isinstance(module, LOOKUPS):
        return False
    return any(p.dim() >= 2 for p in module.parameters(recurse=False))


def _width(module: nn.Module, t: torch.Tensor) -> int:
    if t.dim() == 0:
        return 1
    if isinstance(module, CHANNELS_FIRST):
        spatial = len(module.kernel_size)
        return int(t.shape[max(0, t.dim() - spatial - 1)])
    return int(t.shape[-1])


def _first_tensor(value: Any) -> torch.Tensor | None:
    """The first tensor in an output (a tensor, or nested tuples, lists and mappings)."""
    return next(_tensors(value), None)


def model_output(value: Any) -> torch.Tensor | None:
    """What a model scores, out of what its forward returns: the tensor itself, a Hugging
    Face ``ModelOutput``'s (or any mapping's) ``logits``, or else the first tensor in it
    that is not a scalar: given its labels, such a model returns its 0-d loss first."""
    if isinstance(value, torch.Tensor):
        return value
    logits = value.get("logits") if isinstance(value, Mapping) else None
    if isinstance(logits, torch.Tensor):
        return logits
    tensors = list(_tensors(value))
    return next((t for t in tensors if t.dim() > 0), tensors[0] if tensors else None)


def _tensors(value: Any) -> Iterator[torch.Tensor]:
    """Every tensor in an output (a tensor, or nested tuples, lists and mappings), in order."""
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (Mapping, tuple, list)):
        for item in value.values() if isinstance(value, Mapping) else value:
            yield from _tensors(item)


def classes_of(output: torch.Tensor | None) -> int:
    """The number of classes an output scores: its last dimension (1 for a scalar per example)."""
    if output is None:
        return 0
    return int(output.shape[-1]) if output.dim() >= 2 else 1
