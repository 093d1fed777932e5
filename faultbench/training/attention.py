"""Where a model's attention looks, seen through forward hooks on its attention modules.

An *attention module* is an ``nn.MultiheadAttention``, or any module whose
class name ends in ``Attention`` (nanoGPT's ``CausalSelfAttention``, Hugging
Face's ``GPT2Attention``, ``LlamaAttention``, ...), that returns a tuple whose
second element is the attention weights: a tensor ``(..., queries, keys)``
whose rows sum to 1 (``nn.MultiheadAttention`` returns them unless called
with ``need_weights=False``; a Hugging Face model when it computes them, e.g.
``attn_implementation="eager"`` with ``output_attentions=True``). A module
that returns no weights is not watched on that forward.

Per forward, on the device: the mean *entropy* of a row (nats; a uniform row
over ``k`` keys has ``ln k``, a row on one key 0) and, for self-attention
(as many queries as keys), the mean share of a row's weight on *later*
positions (``key > query``): exactly 0 in a causal model, so a share above 0
in a model meant to be causal means its mask is missing. Only forwards in
training mode count, and only on the steps the Monitor records.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import nn

from faultbench.training.hooks import Hook
from faultbench.training.hostlog import DeviceLog, averaged

ENTROPY, FUTURE = range(2)


def is_attention(module: nn.Module) -> bool:
    """Whether ``module`` is an attention module (see the module's docstring)."""
    return isinstance(module, nn.MultiheadAttention) or type(module).__name__.endswith("Attention")


def attention_weights(out: Any) -> torch.Tensor | None:
    """The weights in an attention module's output, if it returned them."""
    if isinstance(out, (tuple, list)) and len(out) >= 2 and isinstance(out[1], torch.Tensor):
        weights = out[1]
        return weights if weights.dim() >= 2 and weights.numel() else None
    return None


class _Watched:
    """One attention module's per-forward numbers, kept on the device."""

    def __init__(self) -> None:
        self.log = DeviceLog(2)
        self.calls: list[int] = []  # per recorded step: forwards
        self.forwards = 0  # forwards noted so far
        self.assigned = 0  # forwards already assigned to a recorded step

    @torch.no_grad()
    def note(self, weights: torch.Tensor) -> None:
        w = weights.detach().to(torch.promote_types(weights.dtype, torch.float32))
        entropy = -torch.special.xlogy(w, w).sum(-1).mean()
        if w.shape[-1] == w.shape[-2]:  # self-attention: keys are the queries' positions
            future = w.triu(1).sum(-1).mean()
        else:
            future = torch.full((), float("nan"), dtype=w.dtype, device=w.device)
        self.log.append(torch.stack([entropy, future]))
        self.forwards += 1


class AttentionWatch:
    """Forward hooks on a model's attention modules, on only while a recorded step runs
    (as :class:`faultbench.training.activations.ActivationWatch`)."""

    def __init__(self, model: nn.Module) -> None:
        self.watched: dict[str, _Watched] = {}
        self._modules: list[tuple[nn.Module, _Watched]] = []
        self._handles: list[torch.utils.hooks.RemovableHandle] = []
        self._closed = False
        for name, module in model.named_modules():
            if is_attention(module):
                watched = _Watched()
                self.watched[name or type(module).__name__] = watched
                self._modules.append((module, watched))
        self.watch(True)  # the first step is recorded

    def watch(self, on: bool) -> None:
        """Hooks on (the coming step is recorded) or off; never on again once closed."""
        if on and not self._handles and not self._closed:
            self._handles = [
                module.register_forward_hook(Hook(self._hook(watched)), prepend=True)
                for module, watched in self._modules
            ]
        elif not on:
            self._remove_hooks()

    @staticmethod
    def _hook(watched: _Watched) -> Any:
        def hook(module: nn.Module, _args: Any, out: Any) -> None:
            weights = attention_weights(out)
            if module.training and weights is not None:
                watched.note(weights)

        return hook

    def step(self) -> None:
        """Assign the forwards since the last recorded step to this one."""
        for watched in self.watched.values():
            watched.calls.append(watched.forwards - watched.assigned)
            watched.assigned = watched.forwards

    def series(self) -> dict[str, Any]:
        """Per attention module, per recorded step: the trace's attention fields (NaN: no
        forward that returned weights on that step)."""
        entropy: dict[str, np.ndarray] = {}
        future: dict[str, np.ndarray] = {}
        for name, watched in self.watched.items():
            per_step = averaged(watched.log.read(), watched.calls)
            entropy[name], future[name] = per_step[:, ENTROPY], per_step[:, FUTURE]
        return {"attention_entropy": entropy, "attention_future": future}

    def close(self) -> None:
        """Remove the hooks for good."""
        self._closed = True
        self._remove_hooks()

    def reopen(self, on: bool) -> None:
        """Undo :meth:`close` (the run it watched resumed), hooks on if ``on``."""
        self._closed = False
        self.watch(on)

    def _remove_hooks(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []
