"""Instrumentation for any PyTorch training loop, and the benchmark's own.

Three added lines in a user's loop::

    monitor = Monitor(model, optimizer)
    for xb, yb in monitor.batches(loader):   # times the wait for data
        ...; optimizer.step()
        monitor.step(loss)                   # after the update, before zero_grad

The benchmark's loop uses exactly this class, so what a diagnoser is scored on
is what it will see on a user's run.

Cost: a torch call costs microseconds of dispatch, as much as the arithmetic
of a small model's whole step, so recording must not add dozens of them. Each
step makes three ``torch._foreach_copy_`` calls into one persistent flat buffer
(gradients, weights after, weights before) and does the rest with a few numpy
calls on a zero-copy view of that buffer; losses stay tensors until
:meth:`trace`, so nothing waits on ``.item()``.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np
import torch
from torch import nn

from faultbench.trace import RunConfig, Trace

if TYPE_CHECKING:  # doctor and run import this module
    from faultbench.diagnosis import Diagnosis
    from faultbench.doctor import DoctorReport
    from faultbench.run import Probe

B = TypeVar("B")

GRAD, UPDATE, BEFORE = 0, 1, 2  # rows of the work buffer (UPDATE holds weights after)
CHUNK_STEPS = 32  # steps copied before numpy reduces them together
CHUNK_BYTES = 16 << 20  # at most this much copy buffer (fewer steps per chunk for big models)


class Monitor:
    """Records a :class:`Trace` of a training loop.

    Args:
        model: The model being trained. Every ``nn.Linear`` is a "layer";
            every ``nn.ReLU`` output is checked for inactive units.
        optimizer: The optimizer (its learning rate is part of the config).
            Update sizes are measured between consecutive ``step`` calls, so
            weights changed outside the optimizer count as part of the update.
    """

    def __init__(self, model: nn.Module, optimizer: torch.optim.Optimizer) -> None:
        self.model = model
        self.optimizer = optimizer
        self.layers = {n: m for n, m in model.named_modules() if isinstance(m, nn.Linear)}
        self._params = [list(m.parameters()) for m in self.layers.values()]
        self._flat = [p for ps in self._params for p in ps]
        self._work = _WorkBuffer(self._params)
        self._init = self._work.current(self._flat)  # weights at the start, for weight_change
        self._losses: list[torch.Tensor] = []  # this chunk's losses, still tensors
        self._acts: list[torch.Tensor] = []  # this chunk's ReLU outputs (training forwards)
        self._act_calls: list[int] = []  # this chunk: training forwards per step
        self._done: list[np.ndarray] = []  # reduced chunks: loss, inactive share, then stats
        self._wait: list[float] = []
        self._compute: list[float] = []
        self._evals: list[tuple[int, float, float, float]] = []
        self._input_stats: dict[str, float] = {}
        self._batch_size = 0
        self._ready = 0.0
        self._hooks = []
        for module in model.modules():
            if isinstance(module, nn.ReLU):
                self._hooks.append(module.register_forward_hook(self._keep_activations))

    # -- hooks -----------------------------------------------------------------
    def _keep_activations(self, module: nn.Module, _inp: Any, out: torch.Tensor) -> None:
        # Kept by reference until the chunk is reduced; autograd already forbids
        # changing a ReLU output in place while it is needed for backward.
        if module.training and out.dim() >= 2:
            self._acts.append(out.detach())

    # -- the three calls a loop makes ------------------------------------------
    def batches(self, iterable: Iterable[B]) -> Iterator[B]:
        """Yield from ``iterable``, timing how long each batch takes to arrive."""
        iterator = iter(iterable)
        while True:
            start = time.perf_counter()
            try:
                batch = next(iterator)
            except StopIteration:
                return
            self._ready = time.perf_counter()
            self._wait.append(self._ready - start)
            if not self._input_stats:
                self._first_batch(batch)
            yield batch

    def step(self, loss: torch.Tensor | float) -> None:
        """Record one optimizer update; call it after ``optimizer.step()``."""
        self._compute.append(time.perf_counter() - (self._ready or time.perf_counter()))
        if len(self._wait) < len(self._compute):  # loop not using batches()
            self._wait.append(0.0)
        self._losses.append(
            loss.detach().reshape(()) if isinstance(loss, torch.Tensor) else torch.tensor(loss)
        )
        self._act_calls.append(len(self._acts) - sum(self._act_calls))
        if self._work.record(self._flat):
            self._reduce_chunk()

    def log_eval(self, *, train_acc: float, val_acc: float, val_loss: float = float("nan")) -> None:
        """Record an evaluation made after the latest step."""
        self._evals.append((len(self._compute), train_acc, val_acc, val_loss))

    # -- results ---------------------------------------------------------------
    def _reduce_chunk(self) -> None:
        steps = len(self._act_calls)
        if not steps:
            return
        losses = torch.stack(self._losses).to("cpu", torch.float64).numpy()
        used = sum(self._act_calls)
        shares = _inactive_shares(self._acts[:used])
        calls = np.array(self._act_calls)
        owner = np.repeat(np.arange(steps), calls)  # the step each forward belongs to
        sums = np.bincount(owner, weights=shares, minlength=steps)
        inactive = np.divide(sums, calls, out=np.zeros(steps), where=calls > 0)
        self._done.append(np.column_stack([losses, inactive, self._work.reduce()]))
        self._losses, self._acts, self._act_calls = [], self._acts[used:], []

    def _first_batch(self, batch: Any) -> None:
        x = batch[0] if isinstance(batch, (tuple, list)) else batch
        if isinstance(x, torch.Tensor) and x.is_floating_point():
            x = x.detach().double()
            self._input_stats = {
                "mean": float(x.mean()),
                "std": float(x.std()) if x.numel() > 1 else 0.0,
                "abs_max": float(x.abs().max()),
            }
            self._batch_size = int(x.shape[0])
        else:
            self._input_stats = {"mean": float("nan"), "std": float("nan"), "abs_max": float("nan")}

    def config(self) -> RunConfig:
        """The observable configuration of the monitored run."""
        linears = list(self.layers.values())
        group = self.optimizer.param_groups[0]
        return RunConfig(
            optimizer=type(self.optimizer).__name__,
            lr=float(group["lr"]),
            batch_size=self._batch_size,
            steps=len(self._compute),
            n_classes=int(linears[-1].out_features) if linears else 0,
            layer_widths=tuple(
                [int(linears[0].in_features)] + [int(m.out_features) for m in linears]
            )
            if linears
            else (),
            param_count=sum(p.numel() for p in self.model.parameters()),
        )

    def trace(self) -> Trace:
        """The trace recorded so far."""
        self._reduce_chunk()
        names = list(self.layers)
        n = len(names)
        width = 3 + 3 * n
        done = np.concatenate(self._done) if self._done else np.zeros((0, width))
        steps = len(done)
        # Columns: loss, inactive share, nonzero gradients, then per layer the
        # squared norms of the gradient, of the update, and of the weights before it.
        grad, delta, weight = (np.sqrt(done[:, 3 + r * n : 3 + (r + 1) * n]) for r in range(3))
        total = self._work.size
        evals = np.array(self._evals, dtype=np.float64).reshape(-1, 4)
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.where(weight > 0, delta / weight, 0.0)
        return Trace(
            loss=done[:, 0].copy(),
            grad_norm={name: grad[:, j].copy() for j, name in enumerate(names)},
            update_ratio={name: ratio[:, j].copy() for j, name in enumerate(names)},
            zero_grad_share=(total - done[:, 2]) / max(1, total),
            inactive_share=done[:, 1].copy(),
            wait_seconds=np.array(self._wait[:steps]),
            compute_seconds=np.array(self._compute[:steps]),
            eval_steps=evals[:, 0],
            train_acc=evals[:, 1],
            val_acc=evals[:, 2],
            val_loss=evals[:, 3],
            input_stats=dict(self._input_stats),
            no_grad_weights=dict(zip(names, self._work.never_got_gradient())),
            weight_change=self._weight_change(names),
            weight_count=dict(zip(names, self._work.layer_sizes)),
        )

    def _weight_change(self, names: list[str]) -> dict[str, float]:
        now = self._work.current(self._flat)
        moved = self._work.per_layer((now - self._init) ** 2)
        size = self._work.per_layer(self._init**2)
        return {
            name: float(np.sqrt(m / s)) if s > 0 else float(m > 0)
            for name, m, s in zip(names, moved, size)
        }

    def diagnose(self, diagnoser: str = "rules", *, probe: Probe | None = None) -> Diagnosis:
        """Diagnose the monitored run (only passive checks without a ``probe``)."""
        from faultbench.doctor import diagnose_monitor

        return diagnose_monitor(self, diagnoser, probe=probe)

    def doctor(
        self,
        diagnoser: str = "rules",
        *,
        probe: Probe | None = None,
        oom_after_cheap_fixes: bool | None = None,
    ) -> DoctorReport:
        """The diagnosis and the upgrade checklist; ``print()`` it."""
        from faultbench.doctor import doctor

        return doctor(self, diagnoser, probe=probe, oom_after_cheap_fixes=oom_after_cheap_fixes)

    def close(self) -> None:
        """Remove the hooks this monitor put on the model and optimizer."""
        for hook in self._hooks:
            hook.remove()
        self._hooks = []


class _WorkBuffer:
    """Per-step copies of gradients and of the weights after each update, in chunks.

    A step only copies (gradients and weights into one row of a flat buffer);
    the weights before a step are the previous row's weights after, filled in
    at reduction. Every ``chunk`` steps numpy reduces the whole chunk at once,
    so the fixed cost of each array op is paid once per chunk, not per step.
    """

    def __init__(self, layers: Sequence[Sequence[torch.Tensor]]) -> None:
        flat = [p for ps in layers for p in ps]
        wide = any(p.dtype == torch.float64 for p in flat)  # never round a float64 gradient
        sizes = [p.numel() for p in flat]
        self.size = sum(sizes)
        self.layer_sizes = [sum(p.numel() for p in ps) for ps in layers]
        self.starts = np.cumsum([0, *self.layer_sizes[:-1]]) if layers else np.zeros(0, int)
        dtype = torch.float64 if wide else torch.float32
        row_bytes = 3 * max(1, self.size) * dtype.itemsize
        self.chunk = int(min(CHUNK_STEPS, max(1, CHUNK_BYTES // row_bytes)))
        self.tensor = torch.zeros(self.chunk, 3, self.size, dtype=dtype)
        self.array = self.tensor.numpy()
        self._bounds = np.cumsum([0, *sizes]).tolist()
        self._views: list[list[list[torch.Tensor]]] = []  # torch views of the buffer, if needed
        self.no_grad = [torch.zeros_like(p) for p in flat]  # what a None gradient copies
        # CPU weights of the buffer's dtype are copied by numpy, whose calls cost
        # about a microsecond; anything else goes through torch.
        self.direct = all(p.device.type == "cpu" and p.dtype == dtype for p in flat)
        self._weights: list[np.ndarray] = []  # flat numpy views of the weights
        self._pointers: list[int] = []  # where they pointed; a rebound .data renews them
        # The weights before a step are the weights after the previous one: no
        # copy per step, the reduction shifts the AFTER rows down by one.
        self.last = (
            np.concatenate([p.detach().reshape(-1).to("cpu", dtype).numpy() for p in flat])
            if flat
            else np.zeros(0)
        )
        self.seen = np.zeros(self.size, dtype=bool)  # weights that ever got a nonzero gradient
        self.filled = 0  # steps copied into the chunk and not yet reduced

    def record(self, params: Sequence[torch.Tensor]) -> bool:
        """Copy this step's gradients and updated weights; True when the chunk is full."""
        grads = [z if p.grad is None else p.grad for p, z in zip(params, self.no_grad)]
        if self.direct:
            row = self.array[self.filled]
            np.concatenate([g.detach().numpy().reshape(-1) for g in grads], out=row[GRAD])
            np.concatenate(self._weight_arrays(params), out=row[UPDATE])
        else:
            views = self.views(params)[self.filled]
            with torch.no_grad():
                torch._foreach_copy_(views[GRAD] + views[UPDATE], [*grads, *params])
        self.filled += 1
        return self.filled == self.chunk

    def views(self, params: Sequence[torch.Tensor]) -> list[list[list[torch.Tensor]]]:
        """Per step of the chunk, per row: views of the buffer shaped like ``params``."""
        if not self._views:
            bounds = self._bounds
            self._views = [
                [
                    [
                        self.tensor[k, r, a:b].view(p.shape)
                        for p, a, b in zip(params, bounds, bounds[1:])
                    ]
                    for r in range(3)
                ]
                for k in range(self.chunk)
            ]
        return self._views

    def _weight_arrays(self, params: Sequence[torch.Tensor]) -> list[np.ndarray]:
        pointers = [p.data_ptr() for p in params]
        if pointers != self._pointers:
            self._weights = [p.detach().numpy().reshape(-1) for p in params]
            self._pointers = pointers
        return self._weights

    def reduce(self) -> np.ndarray:
        """Per copied step: nonzero gradients, then per layer the squared norms of
        the gradient, the update and the weights before it. Empties the chunk."""
        work = self.array[: self.filled]
        self.filled = 0
        if not len(work):
            return np.zeros((0, 1 + 3 * len(self.starts)))
        work[0, BEFORE] = self.last
        work[1:, BEFORE] = work[:-1, UPDATE]
        self.last = work[-1, UPDATE].copy()
        np.subtract(work[:, UPDATE], work[:, BEFORE], out=work[:, UPDATE])
        nonzero = work[:, GRAD] != 0  # NaN counts as a gradient
        self.seen |= nonzero.any(axis=0)
        out = np.zeros((len(work), 1 + 3 * len(self.starts)))
        out[:, 0] = nonzero.sum(axis=1)
        ends = [*self.starts[1:], self.size]
        for j, (a, b) in enumerate(zip(self.starts, ends)):
            part = work[:, :, a:b]
            # einsum squares and sums in one pass, without a temporary array.
            out[:, 1 + j :: len(ends)] = np.einsum("srw,srw->sr", part, part)
        return out

    def current(self, params: Sequence[torch.Tensor]) -> np.ndarray:
        """The weights now, flat, as float64."""
        if not params:
            return np.zeros(0)
        return torch.cat([p.detach().reshape(-1).double().cpu() for p in params]).numpy()

    def per_layer(self, values: np.ndarray) -> np.ndarray:
        """Sum a flat per-weight array within each layer."""
        return np.add.reduceat(values, self.starts) if len(self.starts) else np.zeros(0)

    def never_got_gradient(self) -> list[int]:
        """Per layer: weights whose gradient was exactly 0 at every step."""
        return [int(n) for n in self.per_layer((~self.seen).astype(np.int64))]


def _inactive_shares(acts: list[torch.Tensor]) -> np.ndarray:
    """Per ReLU output: the share of units that were 0 on the whole batch."""
    shares = np.zeros(len(acts))
    groups: dict[tuple[int, ...], list[int]] = {}
    for i, a in enumerate(acts):
        groups.setdefault(tuple(a.shape), []).append(i)
    for shape, index in groups.items():  # outputs of one shape reduce in one call
        stacked = torch.stack([acts[i] for i in index])
        if stacked.device.type != "cpu" or stacked.dtype not in (torch.float32, torch.float64):
            stacked = stacked.to("cpu", torch.float32)
        values = stacked.numpy().reshape(len(index), -1, shape[-1])
        # fmax skips NaN, so a unit counts as alive iff some output is > 0.
        alive = (np.fmax.reduce(values, axis=1) > 0).sum(axis=1)
        shares[index] = 1.0 - alive / max(1, shape[-1])
    return shares
