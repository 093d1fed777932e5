"""A model's layers and their per-step statistics.

A *layer* is any module with parameters of its own (``recurse=False``), named
by its path in the model: ``nn.Linear``, convolutions, ``nn.GRU``/``nn.LSTM``,
``nn.Embedding``, normalization layers and user-defined modules alike. A
container's own parameters are its layer; its children's are theirs, so
nothing is counted twice (a parameter shared by two modules belongs to the
first). Parameters held by the model itself form the layer ``"(model)"``.

How a step is recorded: at each recorded step, one ``torch.cat`` copies the
gradients, and one the weights, into a row of a block kept on their device
(the parameters themselves are only read). Every ``rows`` recorded steps (or
when the trace is read) the block is reduced at once: a few whole-block
operations, then five reductions per parameter over all the block's rows
(norm and sum of |g|, nonzero entries of g, norm of the update, norm of the
weights before it). So a step costs two copies whatever the model, and the
per-parameter work is shared by up to ``BLOCK_ROWS`` steps; on a small model
that is what keeps the cost per step low, since every torch call costs
microseconds whatever its size. The block holds at most ``BLOCK_BYTES``, so a
large model gets one row (each step reduced at once). Besides the block, the
monitor keeps the weights at the start and a flag per weight (ever got a
gradient), both on the parameters' device.

Weights never given a gradient are a dead unit's signature, except in a lookup
table (``nn.Embedding``): there a row gets a gradient only when the data uses
its token or position, so a vocabulary the data never writes, or positions
beyond its longest sequence, are rows without a gradient in a healthy run. A
table's weights are counted as never given one only in the rows that got one
on some recorded step (none, in practice: a used row's gradient is dense), or
all of them when no row ever got one (a table frozen, or cut off from the
loss). A weight shared by two modules (an output layer tied to the input
embedding) is one parameter, of the first module that holds it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

from faultbench.training.hostlog import DeviceLog
from faultbench.training.widths import LOOKUPS

ROOT = "(model)"  # name of the parameters held by the model itself
LOW_PRECISION = (torch.float16, torch.bfloat16)  # summed in float32
BLOCK_ROWS = 32  # recorded steps reduced together, at most
BLOCK_BYTES = 16 << 20  # the most a block of gradients and weights may take
# Per parameter and recorded step: |g|_2, |g|_1, nonzero entries of g, |update|_2, |w before|_2
GRAD_L2, GRAD_L1, GRAD_NONZERO, UPDATE, WEIGHT = range(5)
STATS = 5


def table_rows(model: nn.Module) -> dict[int, int]:
    """The rows of each lookup table's weight (by the parameter's id): a row is a token."""
    return {
        id(m.weight): int(m.weight.shape[0])
        for m in model.modules()
        if isinstance(m, LOOKUPS) and isinstance(m.weight, torch.Tensor) and m.weight.dim() == 2
    }


def direct_parameters(model: nn.Module) -> dict[str, list[nn.Parameter]]:
    """Each module with parameters of its own, by module path, in the model's order."""
    seen: set[int] = set()
    layers: dict[str, list[nn.Parameter]] = {}
    for name, module in model.named_modules():
        own = [p for p in module.parameters(recurse=False) if id(p) not in seen and p.numel()]
        seen.update(id(p) for p in own)
        if own:
            layers[name or ROOT] = own
    return layers


class _Group:
    """The parameters of one device and dtype, recorded into one block."""

    def __init__(
        self,
        index: list[int],
        params: Sequence[torch.Tensor],
        every: int,
        also_every: Sequence[int] = (),
        rows: dict[int, int] | None = None,
    ) -> None:
        self.index = index  # positions in the monitor's parameter order
        self.every = every  # steps between recorded steps
        self.params = [params[i] for i in index]
        # Per parameter: its rows if it is a lookup table's weight, else 0 (table_rows).
        self.table_rows = [(rows or {}).get(id(p), 0) for p in self.params]
        sizes = [p.numel() for p in self.params]
        self.bounds = list(zip(np.cumsum([0, *sizes[:-1]]).tolist(), np.cumsum(sizes).tolist()))
        first = self.params[0]
        self.acc = torch.float32 if first.dtype in LOW_PRECISION else None  # sums in this dtype
        width = max(1, sum(sizes))
        copies = 2 if every == 1 else 3  # gradients and weights (and weights before, every > 1)
        row_bytes = copies * width * first.element_size()
        self.rows = int(max(1, min(BLOCK_ROWS, BLOCK_BYTES // row_bytes)))
        # Uninitialized: a row is written before it is read, and zeroing the whole
        # block at the start cost more than a short run's recording.
        like = first.new_empty
        self.grads = like(self.rows, width)
        self.weights = like(self.rows + 1, width)  # row 0: the weights before row 1's update
        self.before = None if every == 1 else like(self.rows, width)
        self._copy_weights(self.weights[0])
        if self.before is not None:
            self.before[0] = self.weights[0]
        self.init = self.weights[0].clone()  # weights at the start
        # Per weight: recorded steps whose gradient was nonzero (0: never got one).
        self.seen = torch.zeros(width, dtype=torch.float32, device=first.device)
        # The same, counting only the steps Monitor(every=k) would record, for each k.
        self.seen_at = {k: torch.zeros_like(self.seen) for k in also_every}
        self.reduced = 0  # recorded steps reduced so far (the block's first row's index)
        self.filled = 0  # rows of the block in use
        self.zeros: dict[int, torch.Tensor] = {}  # stand-ins for gradients that are None
        self.log = DeviceLog(STATS * len(index))

    def _flat_grads(self) -> list[torch.Tensor]:
        out = []
        for k, p in enumerate(self.params):
            g = p.grad
            if g is None:
                g = self.zeros.get(k)
                if g is None:
                    g = self.zeros[k] = torch.zeros_like(p)
            elif g.is_sparse:
                g = g.to_dense()
            out.append(g.reshape(-1))
        return out

    @torch.no_grad()
    def _copy_weights(self, row: torch.Tensor) -> None:
        torch.cat([p.detach().reshape(-1) for p in self.params], out=row)

    @torch.no_grad()
    def record(self) -> None:
        torch.cat(self._flat_grads(), out=self.grads[self.filled])
        self._copy_weights(self.weights[self.filled + 1])
        self.filled += 1
        if self.filled == self.rows:
            self.reduce()

    def keep_weights(self) -> None:
        """The weights before the next recorded step (needed only when every > 1)."""
        if self.before is not None:
            self._copy_weights(self.before[self.filled])

    def measure_from_now(self) -> None:
        """The next recorded update is measured from the weights now (a resumed run's
        weights may have been put back to a checkpoint's)."""
        self._copy_weights(
            self.weights[self.filled] if self.before is None else self.before[self.filled]
        )

    @torch.no_grad()
    def reduce(self) -> None:
        """Reduce the block's rows into the log and start a new block.

        Comparisons are written as 0/1 into the block itself rather than as
        booleans: on CPU, torch's boolean outputs and their sums are several
        times slower than the same work on floats.
        """
        n = self.filled
        if not n:
            return
        grads, after = self.grads[:n], self.weights[1 : n + 1]
        before = self.weights[:n] if self.before is None else self.before[:n]
        norm, acc = torch.linalg.vector_norm, self.acc
        l2 = [norm(grads[:, a:b], 2, dim=1, dtype=acc) for a, b in self.bounds]
        l1 = [norm(grads[:, a:b], 1, dim=1, dtype=acc) for a, b in self.bounds]
        nonzero = torch.ne(grads, 0, out=grads)  # NaN counts as nonzero; gradients done with
        counts = [nonzero[:, a:b].sum(1, dtype=acc) for a, b in self.bounds]
        self.seen += nonzero.sum(0, dtype=self.seen.dtype)
        for k, seen in self.seen_at.items():
            rows = [i for i in range(n) if (self.reduced + i) * self.every % k == 0]
            seen += nonzero[rows].sum(0, dtype=seen.dtype)
        self.reduced += n
        delta = torch.sub(after, before, out=grads)
        update = [norm(delta[:, a:b], 2, dim=1, dtype=acc) for a, b in self.bounds]
        weight = [norm(before[:, a:b], 2, dim=1, dtype=acc) for a, b in self.bounds]
        columns = [c for per_param in zip(l2, l1, counts, update, weight) for c in per_param]
        self.log.extend(torch.stack(columns, 1))
        self.weights[0] = self.weights[n]
        if self.before is not None and n < self.rows:
            # Read mid-run (the trace), the weights kept for the next recorded
            # step are in row n: they move to row 0 with the rest.
            self.before[0] = self.before[n]
        self.filled = 0

    @torch.no_grad()
    def at_end(self) -> np.ndarray:
        """(3 + samplings, parameters): weights never given a gradient, |w_now - w_0|^2,
        |w_0|^2, then the weights never given one on each ``also_every`` sampling's steps."""
        self.reduce()
        now = torch.empty_like(self.init)
        self._copy_weights(now)
        rows = self.table_rows
        moved = (now - self.init).to(self.acc or now.dtype) ** 2
        size = self.init.to(self.acc or now.dtype) ** 2
        never = torch.stack(
            [
                torch.stack([_never(seen[a:b], r) for (a, b), r in zip(self.bounds, rows)])
                for seen in (self.seen, *self.seen_at.values())
            ]
        )
        sums = torch.stack(
            [torch.stack([moved[a:b].sum(), size[a:b].sum()]) for a, b in self.bounds]
        )
        # Two reads for the whole group, not three per tensor.
        never_np, sums_np = never.cpu().numpy(), sums.cpu().numpy().T.astype(np.float64)
        return np.vstack([never_np[:1], sums_np, never_np[1:]])


def _never(seen: torch.Tensor, rows: int) -> torch.Tensor:
    """A parameter's weights never given a gradient (``seen``: per weight, the recorded steps
    that gave it one), a lookup table's (``rows`` > 0) only in its rows that got one, or all
    of them when none did (see the module's text)."""
    if not rows:
        return (seen == 0).sum()
    per_row = seen.reshape(rows, -1)
    touched = (per_row > 0).any(1, keepdim=True)
    in_used_rows = ((per_row == 0) & touched).sum()
    return torch.where(touched.any(), in_used_rows, torch.tensor(seen.numel(), device=seen.device))


class LayerStats:
    """Per recorded step, per layer: gradient norm and mean |gradient|, update
    ratio, weight norm; per weight: whether it ever got a gradient."""

    def __init__(self, model: nn.Module, every: int = 1, also_every: Sequence[int] = ()) -> None:
        layers = direct_parameters(model)
        rows = table_rows(model)
        self.also_every = tuple(also_every)
        self.names = list(layers)
        self.params: list[torch.Tensor] = [p for ps in layers.values() for p in ps]
        self.counts = [sum(p.numel() for p in ps) for ps in layers.values()]
        self.starts = np.cumsum([0, *(len(ps) for ps in layers.values())])[:-1]
        by_kind: dict[tuple[torch.device, torch.dtype], list[int]] = {}
        for i, p in enumerate(self.params):
            by_kind.setdefault((p.device, p.dtype), []).append(i)
        self.groups = [
            _Group(index, self.params, every, self.also_every, rows) for index in by_kind.values()
        ]

    def record(self) -> None:
        """This step's gradients and weights (call after the update)."""
        for group in self.groups:
            group.record()

    def keep_weights(self) -> None:
        """The weights now: the next recorded update is measured from them."""
        for group in self.groups:
            group.keep_weights()

    def measure_from_now(self) -> None:
        """The weights now: the next recorded update is measured from them, whatever the
        weights were when the last one was recorded (a run resumed from a checkpoint)."""
        for group in self.groups:
            group.measure_from_now()

    def per_parameter(self) -> np.ndarray:
        """(recorded steps, 5, parameters): the raw per-parameter numbers."""
        for group in self.groups:
            group.reduce()
        reads = [g.log.read() for g in self.groups]
        steps = min((len(r) for r in reads), default=0)
        out = np.zeros((steps, STATS, len(self.params)))
        for group, raw in zip(self.groups, reads):
            per = raw[:steps].reshape(steps, len(group.index), STATS)
            out[:, :, group.index] = per.transpose(0, 2, 1)
        return out

    def _per_layer(self, values: np.ndarray) -> np.ndarray:
        """Sum over each layer's parameters (the last axis)."""
        if not self.names:
            return np.zeros((*values.shape[:-1], 0))
        return np.add.reduceat(values, self.starts, axis=-1)

    def series(self) -> dict[str, Any]:
        """The trace's per-layer series and the per-step zero-gradient share."""
        raw = self.per_parameter()
        grad = np.sqrt(self._per_layer(raw[:, GRAD_L2] ** 2))
        update = np.sqrt(self._per_layer(raw[:, UPDATE] ** 2))
        weight = np.sqrt(self._per_layer(raw[:, WEIGHT] ** 2))
        mean_abs = self._per_layer(raw[:, GRAD_L1]) / np.maximum(1, self.counts)
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.where(weight > 0, update / weight, 0.0)
        total = sum(self.counts)

        def named(values: np.ndarray) -> dict[str, np.ndarray]:
            return {n: values[:, j].copy() for j, n in enumerate(self.names)}

        return {
            "grad_norm": named(grad),
            "grad_mean_abs": named(mean_abs),
            "update_ratio": named(ratio),
            "weight_norm": named(weight),
            "zero_grad_share": (total - raw[:, GRAD_NONZERO].sum(axis=1)) / max(1, total),
        }

    def at_end(self) -> dict[str, dict[str, Any]]:
        """Per layer: weights that never got a gradient (also on each ``also_every``
        sampling's steps), weight change, weight count."""
        per_param = np.zeros((3 + len(self.also_every), len(self.params)))
        for group in self.groups:
            per_param[:, group.index] = group.at_end()
        never, moved, size, *sampled = self._per_layer(per_param)
        return {
            "no_grad_sampled": {
                str(k): {n: int(v) for n, v in zip(self.names, at)}
                for k, at in zip(self.also_every, sampled)
            },
            "no_grad_weights": {n: int(v) for n, v in zip(self.names, never)},
            "weight_change": {
                n: float(np.sqrt(m / s)) if s > 0 else float(m > 0)
                for n, m, s in zip(self.names, moved, size)
            },
            "weight_count": dict(zip(self.names, self.counts)),
        }
