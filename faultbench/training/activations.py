"""What the activation modules of a model output, seen through forward hooks.

Watched are the modules of the ReLU family and the saturating ones, found by
``isinstance`` (subclasses included):

- ReLU family (``RELU_FAMILY``): an output ``<= 0`` means the unit was on its
  flat side (ReLU, ReLU6: no gradient at all) or its low-slope side (LeakyReLU,
  PReLU, RReLU, ELU, CELU, SELU: a gradient scaled down), which for every one of
  them is the same as a pre-activation ``<= 0``. Recorded: the share of outputs
  that are not ``> 0`` (NaN counts as not active), and the share of units that
  are not ``> 0`` anywhere in the batch. A unit is a channel of an output of
  four or more dimensions (a 2-D or 3-D convolution's ``N x C x H x W`` or
  ``N x C x D x H x W``: dimension 1), else a feature of the last dimension
  (a Linear layer's ``N x C``, a sequence model's ``N x T x C``). A ReLU
  module does not know what fed it, so a 1-D convolution's ``N x C x L``
  output is read the sequence way: its units are positions, not channels.
  GELU, SiLU and Mish are smooth and never flat, so they are not in the family.
- Sigmoid and Tanh: the share of saturated outputs, read off the output as a
  pre-activation beyond +-5 would make it: ``sigmoid(x) < sigmoid(-5)`` or
  ``> sigmoid(5)``, ``|tanh(x)| > tanh(5)`` (compared in float32 at least: in
  half precision ``tanh(5)`` rounds to 1, which no output exceeds).
- Every watched module: the mean absolute output.

A functional call (``F.relu(x)``, ``torch.sigmoid(x)``) is not a module, so no
hook can see it: only activation *modules* are watched. Only forwards in
training mode count, and only those of the steps the Monitor records.

Cost: per watched forward, three or four passes over the output on its
device, the comparisons written into one scratch tensor that every watched
module reuses (the size of the largest watched output, per device, stream and
dtype) rather than into a new tensor per output. The hooks are on the model
only during the steps the Monitor records (:meth:`ActivationWatch.watch`).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
from torch import nn

from faultbench.training.hooks import Hook, HookFn
from faultbench.training.hostlog import BLOCK_STEPS, DeviceLog, averaged

RELU_FAMILY = (nn.ReLU, nn.ReLU6, nn.LeakyReLU, nn.PReLU, nn.RReLU, nn.ELU, nn.CELU, nn.SELU)
SATURATING = (nn.Sigmoid, nn.Tanh)
SATURATION_INPUT = 5.0  # |pre-activation| beyond which Sigmoid/Tanh count as saturated
SIGMOID_EDGE = 1.0 / (1.0 + math.exp(-SATURATION_INPUT)) - 0.5  # |sigmoid(x) - 1/2| at |x| = 5
TANH_EDGE = math.tanh(SATURATION_INPUT)

# Per forward, three numbers, divided by the output's size when read:
# [units never > 0, outputs > 0 (ReLU family) or saturated outputs, sum of |outputs|]
UNITS, FLAGGED, ABS_SUM = range(3)
MAX_VIEWS = 64  # output shapes whose scratch views are kept


def units_dim(out: torch.Tensor) -> int | None:
    """The dimension of ``out`` that holds its units (see the module's docstring);
    None for an output of fewer than two dimensions (no batch of units)."""
    if out.dim() < 2:
        return None
    return 1 if out.dim() >= 4 else out.dim() - 1


class _Watched:
    """One activation module's per-forward numbers.

    A ReLU-family forward keeps, per unit, how many of its outputs were > 0
    (a comparison and a sum), and the sum of |outputs|; once per block of
    forwards those become the three numbers, on the device. ReLU, ReLU6 and
    Sigmoid outputs are never negative, so their sum is their sum of |outputs|.
    """

    def __init__(self, module: nn.Module, relu: bool) -> None:
        self.relu = relu  # ReLU family (else saturating)
        self.edge = SIGMOID_EDGE if isinstance(module, nn.Sigmoid) else TANH_EDGE
        self.centre = 0.5 if isinstance(module, nn.Sigmoid) else 0.0
        self.nonnegative = isinstance(module, (nn.ReLU, nn.ReLU6, nn.Sigmoid))  # |out| is out
        self.log = DeviceLog(3)
        self.sizes: list[tuple[int, int]] = []  # per forward: (units, outputs)
        self.calls: list[int] = []  # per recorded step: forwards
        self.assigned = 0  # forwards already assigned to a recorded step
        self._counts: list[torch.Tensor] = []  # this block: per unit outputs > 0, or saturated
        self._abs: list[torch.Tensor] = []  # this block: sum of |outputs| per forward

    def note(self, out: torch.Tensor, work: torch.Tensor) -> None:
        """Reduce one output on its device; ``work`` is scratch of its shape (wide dtype)."""
        dim = units_dim(out)
        if dim is not None and out.shape[dim] == 0:
            dim = None  # no units to count: one number, as for a 1-D output
        units = 0 if dim is None else out.shape[dim]
        if self._abs and units != self.sizes[-1][0]:
            self.flush()  # counts of another width cannot be stacked with these
        x = out.detach()
        # Comparisons are written as 0/1 into ``work`` (a float tensor): on CPU,
        # summing booleans costs several times more (they are converted first).
        if self.nonnegative:  # |output| is the output
            self._abs.append(x.sum(dtype=work.dtype))
        elif x.dtype == work.dtype:
            self._abs.append(torch.abs(x, out=work).sum())
        else:  # abs writes only its own dtype: widen first
            self._abs.append(work.copy_(x).abs_().sum())
        if self.relu:
            torch.gt(x, 0, out=work)
            others = [d for d in range(x.dim()) if d != dim]
            self._counts.append(work.sum(others) if dim is not None else work.sum().reshape(1))
        else:
            if self.centre:  # else work holds |output| already
                torch.sub(x, self.centre, out=work).abs_()
            self._counts.append(torch.gt(work, self.edge, out=work).sum().reshape(1))
        self.sizes.append((units, x.numel()))
        if len(self._abs) >= BLOCK_STEPS:
            self.flush()

    def flush(self) -> None:
        """Turn this block's counts into rows of the log."""
        if not self._abs:
            return
        counts, abs_sums = torch.stack(self._counts), torch.stack(self._abs)
        self._counts, self._abs = [], []
        if self.relu:
            never, flagged = (counts == 0).sum(1), counts.sum(1)
        else:
            never, flagged = torch.zeros_like(counts[:, 0]), counts[:, 0]
        dtype = abs_sums.dtype
        self.log.extend(torch.stack([never.to(dtype), flagged.to(dtype), abs_sums], 1))

    def shares(self) -> np.ndarray:
        """Per forward: [share of units never > 0, share of outputs not > 0 (ReLU
        family) or saturated, mean |output|]; NaN for units of an unbatched output,
        and for every share of an empty one."""
        self.flush()
        raw = self.log.read()
        sizes = np.array(self.sizes, dtype=np.float64).reshape(-1, 2)[: len(raw)]
        out = np.full_like(raw, np.nan)
        batched = sizes[:, 0] > 0
        out[batched, UNITS] = raw[batched, UNITS] / sizes[batched, 0]
        with np.errstate(invalid="ignore"):  # 0 / 0 for an empty output: NaN
            flagged = raw[:, FLAGGED] / sizes[:, 1]
            out[:, ABS_SUM] = raw[:, ABS_SUM] / sizes[:, 1]
        out[:, FLAGGED] = 1.0 - flagged if self.relu else flagged
        return out


class ActivationWatch:
    """Forward hooks on a model's activation modules, on only while a recorded step runs.

    A module with a forward hook takes torch's slower call path on every
    forward, so the hooks are put on before each step the Monitor records and
    taken off after it (:meth:`watch`); on the other steps the model runs as if
    unwatched. ``step()`` closes a recorded step's forwards.
    """

    def __init__(self, model: nn.Module) -> None:
        self.watched: dict[str, _Watched] = {}
        self._modules: list[tuple[nn.Module, _Watched]] = []
        self._handles: list[torch.utils.hooks.RemovableHandle] = []
        self._scratch: dict[tuple[Any, ...], torch.Tensor] = {}  # (device, stream, dtype)
        self._views: dict[tuple[Any, ...], torch.Tensor] = {}  # (device, stream, dtype, shape)
        self._closed = False
        for name, module in model.named_modules():
            relu = isinstance(module, RELU_FAMILY)
            if relu or isinstance(module, SATURATING):
                watched = _Watched(module, relu)
                self.watched[name or type(module).__name__] = watched
                self._modules.append((module, watched))
        self.watch(True)  # the first step is recorded

    def watch(self, on: bool) -> None:
        """Hooks on (the coming step is recorded) or off; never on again once closed."""
        if on and not self._handles and not self._closed:
            # prepend: a user's hook that replaces the output runs after ours, so
            # ours sees what the module itself returned.
            self._handles = [
                module.register_forward_hook(Hook(self._hook(watched)), prepend=True)
                for module, watched in self._modules
            ]
        elif not on:
            self._remove_hooks()

    def _hook(self, watched: _Watched) -> HookFn:
        def hook(module: nn.Module, _args: Any, out: Any) -> None:
            if module.training and isinstance(out, torch.Tensor):
                watched.note(out, self._work_like(out))

        return hook

    def _work_like(self, out: torch.Tensor) -> torch.Tensor:
        """Scratch of ``out``'s shape, on its device, in at least float32, reused.

        One buffer per device, stream and dtype, the size of the largest output so far;
        the view for each shape is kept too (taking one costs more than a
        small output's reductions), up to ``MAX_VIEWS`` shapes (batches of
        varying length make new shapes without end).
        """
        dtype = torch.promote_types(out.dtype, torch.float32)
        # A buffer per stream: forwards on two streams of a device would otherwise
        # write it while the other stream's reductions still read it.
        stream = None if out.device.type == "cpu" else torch.accelerator.current_stream(out.device)
        where = (out.device, stream, dtype)
        view = self._views.get((*where, out.shape))
        if view is None:
            flat = self._scratch.get(where)
            # Made outside inference mode even inside it: an inference tensor could
            # not be written by the forwards that follow.
            with torch.inference_mode(False):
                if flat is None or flat.numel() < out.numel():
                    flat = self._scratch[where] = out.new_empty(out.numel(), dtype=dtype)
                    self._views = {}  # views of the old buffer
                if len(self._views) >= MAX_VIEWS:
                    self._views = {}
                view = self._views[(*where, out.shape)] = flat[: out.numel()].view(out.shape)
        return view

    def step(self) -> None:
        """Assign the forwards since the last recorded step to this one."""
        for watched in self.watched.values():
            watched.calls.append(len(watched.sizes) - watched.assigned)
            watched.assigned = len(watched.sizes)

    def series(self) -> dict[str, Any]:
        """Per recorded step: the trace's activation fields (NaN: no forward that step)."""
        nonpositive: dict[str, np.ndarray] = {}
        saturated: dict[str, np.ndarray] = {}
        mean_abs: dict[str, np.ndarray] = {}
        for name, watched in self.watched.items():
            shares = watched.shares()
            per_step = averaged(shares, watched.calls)
            mean_abs[name] = per_step[:, ABS_SUM]
            if watched.relu:
                nonpositive[name] = per_step[:, FLAGGED]
            else:
                saturated[name] = per_step[:, FLAGGED]
        return {
            "nonpositive_share": nonpositive,
            "saturated_share": saturated,
            "activation_mean_abs": mean_abs,
        }

    def inactive_share(self, steps: int) -> np.ndarray:
        """Per recorded step: the share of units never > 0 on the batch, averaged over
        the step's ReLU-family forwards (0 for a step that had none)."""
        sums, calls = np.zeros(steps), np.zeros(steps)
        for watched in self.watched.values():
            if not watched.relu:
                continue
            counts = watched.calls[:steps]
            shares = watched.shares()[:, UNITS]
            owner = np.repeat(np.arange(len(counts)), counts)
            batched = np.isfinite(shares[: len(owner)])  # units of a batch: the output had rows
            np.add.at(sums, owner[batched], shares[: len(owner)][batched])
            np.add.at(calls, owner[batched], 1)
        return np.divide(sums, calls, out=np.zeros(steps), where=calls > 0)

    def close(self) -> None:
        """Remove the hooks for good."""
        self._closed = True
        self._remove_hooks()
        self._scratch, self._views = {}, {}

    def reopen(self, on: bool) -> None:
        """Undo :meth:`close` (the run it watched resumed), hooks on if ``on``."""
        self._closed = False
        self.watch(on)

    def _remove_hooks(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []
