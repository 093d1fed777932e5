"""What the activation modules of a model output, seen through forward hooks.

Watched are the modules of the ReLU family and the saturating ones, found by
``isinstance`` (subclasses included):

- ReLU family (``RELU_FAMILY``): an output ``<= 0`` means the unit was on its
  flat side (ReLU, ReLU6: no gradient at all) or its low-slope side (LeakyReLU,
  PReLU, RReLU, ELU, CELU, SELU: a gradient scaled down), which for every one of
  them is the same as a pre-activation ``<= 0``. Recorded: the share of outputs
  that are not ``> 0`` (NaN counts as not active), and the share of units (the
  output's last dimension) that are not ``> 0`` anywhere in the batch.
  GELU, SiLU and Mish are smooth and never flat, so they are not in the family.
- Sigmoid and Tanh: the share of saturated outputs, read off the output as a
  pre-activation beyond +-5 would make it: ``sigmoid(x) < sigmoid(-5)`` or
  ``> sigmoid(5)``, ``|tanh(x)| > tanh(5)`` (in the output's precision).
- Every watched module: the mean absolute output.

A functional call (``F.relu(x)``, ``torch.sigmoid(x)``) is not a module, so no
hook can see it: only activation *modules* are watched. Only forwards in
training mode count, and only those of the steps the Monitor records.
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


class _Watched:
    """One activation module's per-forward numbers.

    A ReLU-family forward keeps, per unit, how many of its outputs were > 0
    (a comparison and a sum), and the sum of |outputs|; once per block of
    forwards those become the three numbers, on the device. ReLU and ReLU6
    outputs are never negative, so their sum is their sum of |outputs|.
    """

    def __init__(self, module: nn.Module, relu: bool) -> None:
        self.relu = relu  # ReLU family (else saturating)
        self.edge = SIGMOID_EDGE if isinstance(module, nn.Sigmoid) else TANH_EDGE
        self.centre = 0.5 if isinstance(module, nn.Sigmoid) else 0.0
        self.nonnegative = isinstance(module, (nn.ReLU, nn.ReLU6))  # |output| is the output
        self.log = DeviceLog(3)
        self.sizes: list[tuple[int, int]] = []  # per forward: (units, outputs)
        self.calls: list[int] = []  # per recorded step: forwards
        self.assigned = 0  # forwards already assigned to a recorded step
        self._counts: list[torch.Tensor] = []  # this block: per unit outputs > 0, or saturated
        self._abs: list[torch.Tensor] = []  # this block: sum of |outputs| per forward

    def note(self, out: torch.Tensor) -> None:
        """Reduce one output on its device."""
        units = out.shape[-1] if out.dim() >= 2 else 0
        if self._abs and units != self.sizes[-1][0]:
            self.flush()  # counts of another width cannot be stacked with these
        flat = out.detach().reshape(-1, max(1, units))
        wide = torch.float32 if out.dtype in (torch.float16, torch.bfloat16) else None
        self._abs.append((flat if self.nonnegative else flat.abs()).sum(dtype=wide))
        # Comparisons written as 0/1 floats: on CPU, summing booleans costs
        # several times more (they are converted to integers first).
        flags = torch.empty(flat.shape, dtype=torch.float32, device=flat.device)
        if self.relu:
            self._counts.append(torch.gt(flat, 0, out=flags).sum(0))
        else:
            off_centre = flat if self.centre == 0 else flat - self.centre
            self._counts.append(torch.gt(off_centre.abs(), self.edge, out=flags).sum().reshape(1))
        self.sizes.append((units, flat.numel()))
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
        family) or saturated, mean |output|]; NaN for units of an unbatched output."""
        self.flush()
        raw = self.log.read()
        sizes = np.array(self.sizes, dtype=np.float64).reshape(-1, 2)[: len(raw)]
        out = np.full_like(raw, np.nan)
        batched = sizes[:, 0] > 0
        out[batched, UNITS] = raw[batched, UNITS] / sizes[batched, 0]
        flagged = raw[:, FLAGGED] / sizes[:, 1]
        out[:, FLAGGED] = 1.0 - flagged if self.relu else flagged
        out[:, ABS_SUM] = raw[:, ABS_SUM] / sizes[:, 1]
        return out


class ActivationWatch:
    """Forward hooks on a model's activation modules.

    ``on`` says whether the coming step is one the Monitor records; ``step()``
    closes a recorded step's forwards.
    """

    def __init__(self, model: nn.Module) -> None:
        self.on = True
        self.watched: dict[str, _Watched] = {}
        self._handles: list[torch.utils.hooks.RemovableHandle] = []
        for name, module in model.named_modules():
            relu = isinstance(module, RELU_FAMILY)
            if relu or isinstance(module, SATURATING):
                watched = _Watched(module, relu)
                self.watched[name or type(module).__name__] = watched
                self._handles.append(module.register_forward_hook(Hook(self._hook(watched))))

    def _hook(self, watched: _Watched) -> HookFn:
        def hook(module: nn.Module, _args: Any, out: Any) -> None:
            if self.on and module.training and isinstance(out, torch.Tensor):
                watched.note(out)

        return hook

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
        """Remove the hooks."""
        for handle in self._handles:
            handle.remove()
        self._handles = []
