"""Instrumentation for any PyTorch training loop, and the benchmark's own.

Three added lines in a user's loop::

    monitor = Monitor(model, optimizer)
    for xb, yb in monitor.batches(loader):   # times the wait for data
        ...; optimizer.step()
        monitor.step(loss)                   # after the update, before zero_grad

The benchmark's loop uses exactly this class, so what a diagnoser is scored on
is what it will see on a user's run.

Cost: on a small model a whole training step is a fraction of a millisecond,
mostly call overhead, and measured in place every extra call per step costs
several times its own time, because it evicts torch's code and data from the
caches. So each step's statistics are computed by one call into a small
compiled kernel (faultbench/_stepstats.c) that reads the weights and gradients
where they lie (in place when :func:`pack_layers` laid them end to end), each
ReLU output's inactive units are counted by the kernel as the output is made,
through a wrapped ``forward`` rather than a hook, and the rest is gathered once
per chunk of steps. Where the kernel was not built (no C compiler at install),
a step copies its weights and gradients into a chunk buffer that numpy and
torch reduce together: same statistics, slower.
"""

from __future__ import annotations

import copy
import operator
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, TypeVar

import numpy as np
import torch
from torch import nn

from faultbench.training.trace import RunConfig, Trace

# The compiled kernels (faultbench/_stepstats.c), if they were built.
_kernel: Callable[..., None] | None
_count_inactive: Callable[[int, tuple[int, ...], bool], int] | None
try:  # built at install when a C compiler is there (setup.py)
    from faultbench._stepstats import inactive as _count_inactive
    from faultbench._stepstats import record as _kernel
except ImportError:  # pragma: no cover - depends on the install
    _kernel = _count_inactive = None
F32, F64 = torch.float32, torch.float64

B = TypeVar("B")

WEIGHT, GRAD = 0, 1  # rows of the work buffer: weights after a step, its gradients
# (the gradient row is reused for the update once the chunk's gradients are reduced)
CHUNK_STEPS = 32  # steps kept before they are reduced together (numpy path, kept tensors)
CHUNK_BYTES = 16 << 20  # at most this much copy buffer (fewer steps per chunk for big models)
KERNEL_ROWS = 1024  # steps of kernel results gathered at once: nothing else is kept per step
FULL_CHECK_EVERY = 32  # steps: at least this often, check where every weight and gradient lies


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
        self.layers = _linear_layers(model)
        self._params = [list(m.parameters()) for m in self.layers.values()]
        self._flat = [p for ps in self._params for p in ps]
        self._work = step_stats(self._params)
        self._init = self._work.current(self._flat)  # weights at the start, for weight_change
        self._losses: list[float | torch.Tensor] = []  # this chunk's (device ones as tensors)
        # This chunk's ReLU outputs (training forwards): their inactive share, or
        # the output itself where the kernel cannot read it (reduced per chunk).
        self._acts = _Sink()
        self._act_calls: list[int] = []  # this chunk: training forwards per step
        self._acts_counted = 0  # outputs in _acts already assigned to a step
        self._holding = False  # whether this chunk keeps a loss tensor
        self._done: list[np.ndarray] = []  # reduced chunks: loss, inactive share, then stats
        self._wait: list[float] = []
        self._compute: list[float] = []
        self._evals: list[tuple[int, float, float, float]] = []
        self._input_stats: dict[str, float] = {}
        self._batch_size = 0
        self._ready = 0.0
        self._hooks: list[_ActivationTap | torch.utils.hooks.RemovableHandle] = []
        for module in model.modules():
            if isinstance(module, nn.ReLU):
                self._hooks.append(_ActivationTap.on(module, self._acts))

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
        now = time.perf_counter()
        self._compute.append(now - (self._ready or now))
        if len(self._wait) < len(self._compute):  # loop not using batches()
            self._wait.append(0.0)
        if not isinstance(loss, torch.Tensor):
            self._losses.append(float(loss))
        elif loss.is_cpu:  # reading it now costs less than keeping a tensor
            self._losses.append(loss.item())  # a one-element loss; anything bigger raises
        else:  # reading it would wait for the device: kept until the chunk ends
            self._losses.append(loss.detach().reshape(()))
            self._holding = True
        self._act_calls.append(len(self._acts) - self._acts_counted)
        self._acts_counted = len(self._acts)
        full = self._work.record(self._flat)
        if full or (len(self._act_calls) % CHUNK_STEPS == 0 and self._keeps_tensors()):
            self._reduce_chunk()

    def _keeps_tensors(self) -> bool:
        """Whether this chunk keeps tensors, which are reduced every ``CHUNK_STEPS``
        steps to bound memory; floats wait until the kernel's rows are full."""
        return self._holding or self._acts.kept > 0

    def log_eval(
        self,
        *,
        train_acc: float,
        val_acc: float,
        val_loss: float = float("nan"),
        step: int | None = None,
    ) -> None:
        """Record an evaluation of the weights after ``step`` updates (default:
        the latest step). Evaluations are logged in the order of their steps."""
        at = len(self._compute) if step is None else int(step)
        if self._evals and at < self._evals[-1][0]:
            raise ValueError(
                f"log_eval(step={at}): evaluations are logged in step order, "
                f"and step {self._evals[-1][0]:.0f} was logged already"
            )
        self._evals.append((at, train_acc, val_acc, val_loss))

    # -- results ---------------------------------------------------------------
    def _reduce_chunk(self) -> None:
        steps = len(self._act_calls)
        if not steps:
            return
        losses = _loss_values(self._losses) if self._holding else np.array(self._losses)
        used = self._acts_counted
        acts = self._acts[:used]
        shares = _inactive_shares(acts) if self._acts.kept else np.array(acts, dtype=np.float64)
        if self._act_calls.count(1) == steps:  # the usual loop: one forward per step
            inactive = shares
        else:  # average the outputs of each step's forwards
            calls = np.array(self._act_calls)
            owner = np.repeat(np.arange(steps), calls)  # the step each forward belongs to
            sums = np.bincount(owner, weights=shares, minlength=steps)
            inactive = np.divide(sums, calls, out=np.zeros(steps), where=calls > 0)
        self._done.append(np.column_stack([losses, inactive, self._work.reduce()]))
        del self._acts[:used]  # in place: the taps hold this list
        self._acts.kept = sum(a.__class__ is not float for a in self._acts)  # usually none left
        self._losses, self._act_calls = [], []
        self._acts_counted = 0
        self._holding = False

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
        # norms of the gradient, of the update, and of the weights before it.
        grad, delta, weight = (done[:, 3 + r * n : 3 + (r + 1) * n] for r in range(3))
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

    def close(self) -> None:
        """Remove the hooks this monitor put on the model and optimizer."""
        for hook in self._hooks:
            hook.remove()
        self._hooks = []


class _Sink(list[float | torch.Tensor]):
    """ReLU outputs of a chunk as the taps leave them: their inactive share, or
    the output itself where the kernel cannot read it (``kept`` counts those)."""

    kept = 0


class _ActivationTap:
    """Notes the inactive share of a module's outputs in training forwards, by
    wrapping its ``forward``.

    A forward hook would do the same, but any hook sends every call of the
    module through torch's general (slow) call path, which alone costs more
    per step than this whole monitor should. The share is counted as soon as
    the output exists (see :func:`_inactive_now`); an output the kernel cannot
    read is kept by reference until its chunk is reduced, which is safe
    because autograd forbids changing a ReLU output in place while backward
    needs it.
    """

    def __init__(self, module: nn.Module, sink: _Sink) -> None:
        self.module = module
        self.sink = sink
        self.own = module.__dict__.get("forward")  # an instance forward it replaces, if any
        self.inner = module.forward

    @classmethod
    def on(
        cls, module: nn.Module, sink: _Sink
    ) -> _ActivationTap | torch.utils.hooks.RemovableHandle:
        plain = type(module) is nn.ReLU and "forward" not in module.__dict__
        tap = (_ReluTap if plain and cls is _ActivationTap else cls)(module, sink)
        try:
            module.forward = tap  # type: ignore[method-assign]
        except (AttributeError, RuntimeError):  # a module that refuses (scripted): hook it
            return module.register_forward_hook(
                lambda m, _i, out: tap.keep(out) if m.training else None
            )
        return tap

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        out = self.inner(*args, **kwargs)
        if self.module.training:
            self.keep(out)
        return out

    def keep(self, out: Any) -> None:
        """Note the output of one training forward."""
        if isinstance(out, torch.Tensor):
            share = _inactive_now(out)
            if share is not None:
                self.sink.append(share)
                if share.__class__ is not float:
                    self.sink.kept += 1

    def __deepcopy__(self, memo: dict[int, Any]) -> Any:
        # A copy of a monitored model is not monitored: it gets the forward
        # this tap wraps, bound to the copy.
        return copy.deepcopy(self.inner, memo)

    def __reduce__(self) -> Any:
        return self.inner.__reduce__()  # pickled, likewise

    def remove(self) -> None:
        if self.module.__dict__.get("forward") is self:
            if self.own is None:
                del self.module.forward
            else:
                self.module.forward = self.own  # type: ignore[method-assign]


class _ReluTap(_ActivationTap):
    """The tap of a plain ``nn.ReLU``: calls ``torch.relu`` itself, as
    ``ReLU.forward`` would through ``F.relu``, two Python calls fewer per forward
    (an input with ``__torch_function__``, or ``inplace=True``, takes the usual way)."""

    def __call__(self, input: Any) -> Any:  # named as in ReLU.forward
        if input.__class__ is torch.Tensor and not self.module.inplace:
            out = torch.relu(input)
        else:
            out = self.inner(input)
        if self.module.training:
            self.keep(out)
        return out


class _StepStats:
    """Per step: the nonzero gradient count and, per layer, the norms of the
    gradient, of the update and of the weights before it; across steps: which
    weights ever got a nonzero gradient.

    ``record`` is called after every update and says when a chunk of steps is
    complete; ``reduce`` then returns the chunk's rows. Two ways to compute
    them, same numbers: :class:`_KernelStats` (the compiled kernel, one pass
    per step) and :class:`_ChunkedStats` (numpy and torch, when the kernel was
    not built).
    """

    def __init__(self, layers: Sequence[Sequence[torch.Tensor]]) -> None:
        flat = [p for ps in layers for p in ps]
        wide = any(p.dtype == torch.float64 for p in flat)  # never round a float64 gradient
        self.dtype = torch.float64 if wide else torch.float32
        self.size = sum(p.numel() for p in flat)
        self.layer_sizes = [sum(p.numel() for p in ps) for ps in layers]
        self.starts = np.cumsum([0, *self.layer_sizes[:-1]]) if layers else np.zeros(0, int)
        self.bounds = list(zip(self.starts.tolist(), [*self.starts[1:].tolist(), self.size]))
        self.chunk: int  # steps recorded between reductions, set by each way
        self.no_grad = [torch.zeros_like(p) for p in flat]  # what a None gradient copies
        # CPU tensors of the buffer's dtype can be viewed as one flat tensor;
        # anything else is copied (and converted) tensor by tensor.
        self.direct = all(p.device.type == "cpu" and p.dtype == self.dtype for p in flat)
        self._where: list[int] = []  # data pointers of the weights and gradients last seen
        self._storage = 0  # the packed storage (its address), while packed
        self._uses = 0  # how many tensors used it at the last full check
        self._quick_checks = 0  # steps left that may trust that count
        self._packed: torch.Tensor | None = None  # one view of them all, if they lie end to end
        self._packed_at = 0  # its address
        numpy_dtype = np.float64 if wide else np.float32
        self.last = self.current(flat).astype(numpy_dtype)  # weights before the next step
        self.filled = 0  # steps recorded and not yet reduced

    def record(self, params: Sequence[torch.Tensor]) -> bool:
        """Take this step's weights and gradients; True when the chunk is full."""
        raise NotImplementedError

    def reduce(self) -> np.ndarray:
        """Per step since the last call: nonzero gradients, then per layer the
        norms of the gradient, of the update and of the weights before it."""
        raise NotImplementedError

    def _tensors(self, params: Sequence[torch.Tensor]) -> list[torch.Tensor] | None:
        """This step's weights then gradients; None when they still lie end to
        end where they did last step (then ``self._packed`` views them all)."""
        # The usual step asks torch one thing: how many tensors share the packed
        # storage. Moving a weight (``p.data = x``) or replacing a gradient
        # (``zero_grad(set_to_none=True)``, ``p.grad = g``) drops a tensor from
        # it, so the count changes; a step that changes it is checked in full,
        # and so is every FULL_CHECK_EVERY-th step, in case a loop both dropped
        # a tensor and added a view of the storage in the same step.
        uses = _storage_uses
        if self._quick_checks and uses is not None and uses(self._storage) == self._uses:
            self._quick_checks -= 1
            return None
        grads = [*map(_grad_of, params)]
        try:  # not the gradients themselves: holding them would keep the count up
            where = [*map(_data_ptr, params), *map(_data_ptr, grads)]
        except TypeError:  # a gradient is None: never packed
            where = []
        if where == self._where and self._packed is not None:
            self._start_quick_checks()
            return None
        self._where = where
        tensors = [*params, *(z if g is None else g for g, z in zip(grads, self.no_grad))]
        self._packed = _packed(tensors) if self.direct else None
        self._packed_at = 0 if self._packed is None else self._packed.data_ptr()
        self._start_quick_checks()
        return None if self._packed is not None else tensors

    def _start_quick_checks(self) -> None:
        """After a full check that found the tensors packed, count the storage's
        users; the next steps compare with this count instead of asking torch
        where each tensor lies."""
        if self._packed is None or _storage_uses is None:
            self._quick_checks = 0
            return
        self._storage = self._packed.untyped_storage()._cdata
        self._uses = _storage_uses(self._storage)
        self._quick_checks = FULL_CHECK_EVERY - 1

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
        return [int(n) for n in self.per_layer((~self.ever_seen()).astype(np.int64))]

    def ever_seen(self) -> np.ndarray:
        """Per weight: whether its gradient was ever nonzero."""
        raise NotImplementedError


class _KernelStats(_StepStats):
    """Each step's statistics computed at once by the compiled kernel.

    The kernel reads the weights and gradients where they lie when
    :func:`pack_layers` put them end to end (nothing is copied), and from a
    copy in a scratch buffer otherwise. It also keeps ``last`` (the weights
    before the next step) and ``seen_bits`` up to date.
    """

    def __init__(
        self, layers: Sequence[Sequence[torch.Tensor]], kernel: Callable[..., None]
    ) -> None:
        super().__init__(layers)
        self.kernel = kernel
        n = len(self.layer_sizes)
        width = 1 + 3 * n
        self.chunk = max(CHUNK_STEPS, min(KERNEL_ROWS, CHUNK_BYTES // (8 * width)))
        self.rows = np.zeros((self.chunk, width))
        # Each row's address by arithmetic: ``.ctypes`` builds a helper object
        # per call, which a thousand times over costs about 1% of a digits run.
        first, stride = self.rows.ctypes.data, self.rows.strides[0]
        self.row_at = [first + k * stride for k in range(self.chunk)]
        self.bound_array = np.array([0, *np.cumsum(self.layer_sizes)], dtype=np.int64)
        self.scratch = torch.zeros(2, self.size, dtype=self.dtype)  # weights, gradients
        self.grad_offset = self.size * self.scratch.element_size()  # bytes from weights to grads
        # A bit per weight (bit i % 8 of byte i // 8), and a byte to spare.
        self.seen_bits = np.zeros(self.size // 8 + 2, dtype=np.uint8)
        # The kernel's arguments that never change: before, seen; then bounds, layers, wide.
        self.fixed = (self.last.ctypes.data, self.seen_bits.ctypes.data)
        self.tail = (self.bound_array.ctypes.data, n, self.dtype == torch.float64)
        self._scratch_views: list[torch.Tensor] = []

    def record(self, params: Sequence[torch.Tensor]) -> bool:
        tensors = self._tensors(params)
        if tensors is None:
            weights = self._packed_at
        else:
            if not self._scratch_views:
                self._scratch_views = _shaped_views(self.scratch, params)
            with torch.no_grad():
                torch._foreach_copy_(self._scratch_views, tensors)
            weights = self.scratch.data_ptr()
        filled = self.filled
        grads = weights + self.grad_offset
        self.kernel(weights, grads, *self.fixed, self.row_at[filled], *self.tail)
        self.filled = filled = filled + 1
        return filled == self.chunk

    def reduce(self) -> np.ndarray:
        steps, self.filled = self.filled, 0
        return self.rows[:steps].copy()

    def ever_seen(self) -> np.ndarray:
        return np.unpackbits(self.seen_bits, bitorder="little")[: self.size].astype(bool)


class _ChunkedStats(_StepStats):
    """Each step copies its weights and gradients into one row of a flat
    buffer (one call when the tensors lie end to end, see :func:`pack_layers`).
    Every ``chunk`` steps the whole chunk is reduced at once, so the fixed
    cost of each call is paid once per chunk, not per step. The weights before
    a step are the previous row's weights after: never copied, only subtracted.
    """

    def __init__(self, layers: Sequence[Sequence[torch.Tensor]]) -> None:
        super().__init__(layers)
        self.seen = np.zeros(self.size, dtype=bool)  # weights that ever got a gradient
        row_bytes = 2 * max(1, self.size) * self.dtype.itemsize
        self.chunk = int(min(CHUNK_STEPS, max(1, CHUNK_BYTES // row_bytes)))
        self.tensor = torch.zeros(self.chunk, 2, self.size, dtype=self.dtype)
        self.array = self.tensor.numpy()
        # Nonzero flags (a byte each) padded to whole 64-bit words, counted by popcount.
        padded = -(-self.size // 64) * 64
        self.nonzero_bytes = np.zeros((self.chunk, padded), dtype=np.uint8)
        self.nonzero = self.nonzero_bytes.view(bool)[:, : self.size]
        # Per step, one torch copy into a row: a numpy call here would evict
        # enough of torch's code and data from the caches to slow the next
        # training step more than the copy itself costs.
        both = self.tensor.view(self.chunk, 2 * self.size)
        self._rows = list(both.unbind(0))
        self._views: list[list[torch.Tensor]] = []  # torch views of the buffer, if needed
        self.last_norms = self._norms(torch.from_numpy(self.last))

    def record(self, params: Sequence[torch.Tensor]) -> bool:
        tensors = self._tensors(params)
        with torch.no_grad():
            if tensors is None:
                assert self._packed is not None  # for mypy: _tensors returns None only then
                self._rows[self.filled].copy_(self._packed)
            else:
                torch._foreach_copy_(self.views(params)[self.filled], tensors)
        self.filled += 1
        return self.filled == self.chunk

    def views(self, params: Sequence[torch.Tensor]) -> list[list[torch.Tensor]]:
        """Per step of the chunk: views of its row shaped like ``params`` then their gradients."""
        if not self._views:
            self._views = [_shaped_views(self.tensor[k], params) for k in range(self.chunk)]
        return self._views

    def reduce(self) -> np.ndarray:
        steps, self.filled = self.filled, 0
        n = len(self.bounds)
        out = np.zeros((steps, 1 + 3 * n))
        if not steps:
            return out
        work = self.array[:steps]
        weights, grads = work[:, WEIGHT], work[:, GRAD]
        nonzero = np.not_equal(grads, 0, out=self.nonzero[:steps])  # NaN is nonzero
        out[:, 0] = np.bitwise_count(self.nonzero_bytes[:steps].view(np.uint64)).sum(axis=1)
        self.seen |= np.logical_or.reduce(nonzero, axis=0)
        rows = self.tensor[:steps]
        for j, (a, b) in enumerate(self.bounds):
            # One call per layer: the norms of its weights and gradient at every step.
            norms = torch.linalg.vector_norm(rows[:, :, a:b], dim=2).double().numpy()
            out[:, 1 + j] = norms[:, GRAD]
            out[0, 1 + 2 * n + j] = self.last_norms[j]
            out[1:, 1 + 2 * n + j] = norms[:-1, WEIGHT]
            self.last_norms[j] = norms[-1, WEIGHT]
        # The gradients are reduced: their row now takes the updates.
        updates = grads
        np.subtract(weights[:1], self.last, out=updates[:1])
        np.subtract(weights[1:], weights[:-1], out=updates[1:])
        self.last[:] = weights[-1]
        for j, (a, b) in enumerate(self.bounds):
            out[:, 1 + n + j] = torch.linalg.vector_norm(rows[:, GRAD, a:b], dim=1).numpy()
        return out

    def ever_seen(self) -> np.ndarray:
        return self.seen

    def _norms(self, flat: torch.Tensor) -> np.ndarray:
        return np.array([float(torch.linalg.vector_norm(flat[a:b])) for a, b in self.bounds])


def step_stats(layers: Sequence[Sequence[torch.Tensor]]) -> _StepStats:
    """The per-step statistics of ``layers``: the compiled kernel when it was built."""
    if _kernel is not None and any(p.numel() for ps in layers for p in ps):
        return _KernelStats(layers, _kernel)
    return _ChunkedStats(layers)


def pack_layers(model: nn.Module) -> None:
    """Lay the weights and gradients of ``model``'s ``nn.Linear`` layers end to end.

    All become views of one flat storage (the weights, then their gradients,
    in the monitor's order), so :class:`Monitor` reads a step's weights and
    gradients in place (or, without the compiled kernel, with one copy instead
    of one per tensor). Training computes the same numbers. Backward adds into
    the gradient views, so clear them with ``zero_grad(set_to_none=False)``: a
    gradient set to ``None`` is reallocated elsewhere, and the monitor then
    copies tensor by tensor (still correct, only slower).
    """
    params = [p for m in _linear_layers(model).values() for p in m.parameters()]
    if not params or len({(p.device, p.dtype) for p in params}) > 1:
        return  # nothing to pack, or tensors that cannot share one buffer
    size = sum(p.numel() for p in params)
    with torch.no_grad():
        both = params[0].new_zeros(2 * size)
        weights, grads = both[:size], both[size:]
        start = 0
        for p in params:
            end = start + p.numel()
            weights[start:end].copy_(p.detach().reshape(-1))
            if p.grad is not None:
                grads[start:end].copy_(p.grad.reshape(-1))
            p.data = weights[start:end].view_as(p)
            p.grad = grads[start:end].view_as(p)
            start = end


def _linear_layers(model: nn.Module) -> dict[str, nn.Linear]:
    """The layers a monitor watches, in the order it lays out their tensors."""
    return {n: m for n, m in model.named_modules() if isinstance(m, nn.Linear)}


_data_ptr = torch.Tensor.data_ptr
_grad_of = operator.attrgetter("grad")
# How many tensors share a storage (a private torch function; without it,
# every step is checked in full).
_storage_uses: Callable[[int], int] | None = getattr(torch._C, "_storage_Use_Count", None)


def _packed(tensors: Sequence[torch.Tensor]) -> torch.Tensor | None:
    """One flat view over ``tensors`` if they are contiguous and end to end, else None."""
    if not tensors:
        return torch.zeros(0)
    first = tensors[0].detach()
    at = first.data_ptr()
    for t in tensors:
        if not t.is_contiguous() or t.data_ptr() != at or t.dtype != first.dtype:
            return None
        at += t.numel() * t.element_size()
    total = sum(t.numel() for t in tensors)
    return torch.as_strided(first, (total,), (1,), first.storage_offset())


def _shaped_views(rows: torch.Tensor, params: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """Views of a (weights, gradients) pair of flat rows shaped like ``params``,
    then like their gradients: where a tensor-by-tensor copy writes them."""
    bounds = np.cumsum([0, *(p.numel() for p in params)]).tolist()
    return [
        rows[r, a:b].view(p.shape)
        for r in (WEIGHT, GRAD)
        for p, a, b in zip(params, bounds, bounds[1:])
    ]


def _loss_values(losses: Sequence[float | torch.Tensor]) -> np.ndarray:
    """The losses as float64, device tensors read in one transfer."""
    on_device = [v for v in losses if isinstance(v, torch.Tensor)]
    if not on_device:
        return np.array(losses, dtype=np.float64)
    read = iter(torch.stack(on_device).to("cpu", torch.float64).tolist())
    return np.array([next(read) if isinstance(v, torch.Tensor) else v for v in losses])


def _inactive_now(out: torch.Tensor) -> float | torch.Tensor | None:
    """The share of ``out``'s units (last dimension) that are 0 on the whole
    batch, counted now by the kernel; or ``out`` itself, to reduce with its
    chunk; None for an output of fewer than two dimensions (no batch of units).

    Counting at once lets the output be freed as usual: keeping a chunk of
    outputs alive makes every step write its activations to fresh memory.
    This runs at every training forward, so it asks torch only what it must.
    """
    shape = out.shape
    if len(shape) < 2:
        return None
    dtype = out.dtype
    if (
        _count_inactive is not None
        and (dtype is F32 or dtype is F64)
        and out.is_cpu
        and out.is_contiguous()
    ):
        units = shape[-1]
        inactive = _count_inactive(out.data_ptr(), shape, dtype is F64)
        if inactive >= 0:  # -1: an empty output
            return 1.0 - (units - inactive) / units  # as _inactive_shares computes it
    return out.detach()


def _inactive_shares(acts: Sequence[float | torch.Tensor]) -> np.ndarray:
    """Per ReLU output: the share of its units (last dimension) that were 0 on the whole batch."""
    shares = np.zeros(len(acts))
    groups: dict[tuple[int, ...], list[int]] = {}
    outputs: dict[int, torch.Tensor] = {}
    for i, a in enumerate(acts):
        if isinstance(a, torch.Tensor):
            outputs[i] = a
            groups.setdefault(tuple(a.shape), []).append(i)
        else:
            shares[i] = a  # counted by the kernel
    for shape, index in groups.items():  # outputs of one shape reduce in one call
        units = shape[-1]
        stacked = torch.stack([outputs[i] for i in index]).reshape(len(index), -1, units)
        highest = stacked.amax(dim=1)  # torch reduces across rows fastest this way
        alive = highest > 0
        if highest.isnan().any():  # a unit is alive iff some output is > 0, NaN or not
            alive = (stacked > 0).any(dim=1)
        shares[index] = 1.0 - alive.sum(dim=1).cpu().numpy() / max(1, units)
    return shares
