"""Instrumentation for any PyTorch training loop, and the benchmark's own.

Three added lines in a user's loop::

    monitor = Monitor(model, optimizer)
    for xb, yb in monitor.batches(loader):   # times the wait for data
        ...; optimizer.step()
        monitor.step(loss, out, yb)          # after the update, before zero_grad

The benchmark's loop uses exactly this class, so what a diagnoser is scored on
is what it will see on a user's run.

What it watches (see :mod:`faultbench.training.layers`,
:mod:`faultbench.training.activations` and :mod:`faultbench.training.widths`):
every module with parameters of its own, whatever its type, and the
activation modules of the ReLU family and Sigmoid/Tanh, through public
forward hooks. It only reads the model: no parameter is moved or replaced and
no method patched. It computes with public torch calls on the parameters' own
device and reads nothing back from the device inside :meth:`Monitor.step`:
per-step values are kept there and copied to the host in blocks without
waiting (:mod:`faultbench.training.hostlog`); only :meth:`Monitor.trace` waits.

Cost: a recorded step copies the gradients and the weights into a block on
their device (two ``torch.cat`` calls), reduced 32 steps at a time, and each
watched activation module's output costs three or four passes over it. The
activation hooks are on the model only while a recorded step runs, so the
other steps cost the loss, the batch accuracy, the timings and a few list
appends. ``every=k`` records on steps 1, 1 + k, 1 + 2k, ... only. Recorded
every step, this adds 13-18% to a 7 ms step of a small ResNet (and 45% to
the 0.3 ms step of the digits MLP), not what a practitioner wants by default.
The default, ``every=20`` (:data:`DEFAULT_EVERY`), keeps what the Monitor
adds to a ResNet step within 3% (README, Performance) and still gives a run
of a few hundred steps 10 to 30 samples of every series; monitoring tools
sample as sparsely or more (Lightning logs every 50 steps). The benchmark's own loop
records every step (``every=1``), so each diagnoser is scored on the whole
of every series; the reference rules name the same 50 of 50 classic digits
runs from traces recorded every step, every 10th or every 20th.
``faultbench bench`` prices the default and every step on three step sizes.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, TypeVar

import numpy as np
import torch
from torch import nn

from faultbench.core.errors import FaultbenchError
from faultbench.training.activations import ActivationWatch
from faultbench.training.attention import AttentionWatch
from faultbench.training.hostlog import DeviceLog
from faultbench.training.layers import LayerStats
from faultbench.training.trace import RunConfig, Trace
from faultbench.training.widths import FirstForward, classes_of

B = TypeVar("B")
INPUT_STATS = ("mean", "std", "abs_max")  # of the first batch's inputs
DEFAULT_EVERY = 20  # steps between recorded per-layer and activation statistics
#: Samplings an every-step trace of the benchmark keeps counts for, so that it can be
#: read as Monitor(every=k) would have recorded it (Trace.sampled): the default among them.
SAMPLINGS = (5, 10, DEFAULT_EVERY, 50)
IGNORE_INDEX = -100  # a target that the loss skips: torch's cross_entropy default
# Per step given an output and a target: correct counted targets, counted targets, padding
# positions (a mask given) and padding positions whose target counted.
HITS, COUNTED, PADDED, PADDED_COUNTED = range(4)


class Monitor:
    """Records a :class:`Trace` of a training loop.

    Create it once the model is on its device and before training starts:
    weight changes are measured from the weights it finds.

    Args:
        model: The model being trained; any ``nn.Module``.
        optimizer: The optimizer (its class and learning rate are part of the
            config). Update sizes are measured between consecutive ``step``
            calls, so weights changed outside the optimizer count as part of
            the update.
        every: Record the per-layer and activation statistics on every
            ``every``-th step only (default :data:`DEFAULT_EVERY`; 1: every
            step, as the benchmark records). Loss, batch accuracy, the
            learning rate and timings are recorded at every step regardless.
        also_every: Sparser samplings (multiples of ``every``) the trace should
            also be readable at (:meth:`Trace.sampled`): the weights never given
            a gradient are counted on their steps too. By default the multiples of
            ``every`` among :data:`SAMPLINGS`, so an every-step trace reads as any
            usual sampling would have recorded it.
        ignore_index: The target value the loss skips (a padded or prompt
            position of a language model's labels): such targets count
            neither in the accuracy nor as counted tokens.

    Raises:
        FaultbenchError: ``every`` is not a whole number of steps >= 1, or an
            ``also_every`` is not a multiple of it.
    """

    def __init__(
        self,
        model: nn.Module,
        optimizer: torch.optim.Optimizer,
        *,
        every: int = DEFAULT_EVERY,
        also_every: Sequence[int] | None = None,
        ignore_index: int = IGNORE_INDEX,
    ):
        if isinstance(every, bool) or not isinstance(every, int) or every < 1:
            raise FaultbenchError(f"every={every!r}: expected a whole number of steps >= 1")
        if also_every is None:
            also_every = [k for k in SAMPLINGS if k % every == 0]
        for k in also_every:
            if isinstance(k, bool) or not isinstance(k, int) or k < 1 or k % every:
                raise FaultbenchError(
                    f"also_every={k!r}: expected a multiple of every={every} (a sparser sampling)"
                )
        self.model = model
        self.optimizer = optimizer
        self.every = every
        self._layers = LayerStats(model, every, tuple(k for k in also_every if k != every))
        self._acts = ActivationWatch(model)
        self._attention = AttentionWatch(model)
        self._first = FirstForward(model)
        self._losses = DeviceLog(1)
        self.ignore_index = ignore_index
        self._hits = DeviceLog(4)  # per step given an output and target: HITS, COUNTED, ...
        self._acc_steps: list[int] = []  # those steps' indices
        self._acc_sizes: list[int] = []  # and their numbers of targets (positions, per token)
        self._masked: list[bool] = []  # and whether a padding mask came with them
        self._output_classes = 0  # last dimension of the first output given to step()
        self._stat_steps: list[int] = []
        self._lrs: list[Any] = []  # per step: the first parameter group's rate
        self._steps = 0
        self._wait: list[float] = []
        self._compute: list[float] = []
        self._evals: list[tuple[int, float, float, float, float]] = []
        self._inputs = DeviceLog(len(INPUT_STATS))  # the first batch's input statistics
        self._batch_size = 0
        self._ready = 0.0

    @property
    def layers(self) -> list[str]:
        """The names of the layers it watches (module paths)."""
        return list(self._layers.names)

    # -- the calls a loop makes --------------------------------------------------
    def batches(self, iterable: Iterable[B]) -> Iterator[B]:
        """Yield from ``iterable``, timing how long each batch takes to arrive."""
        iterator = iter(iterable)
        while True:
            start = time.perf_counter()
            try:
                batch = next(iterator)
            except StopIteration:
                return
            self.batch_arrived(batch, waited=time.perf_counter() - start)
            yield batch

    def batch_arrived(self, batch: Any, *, waited: float) -> None:
        """Note that ``batch`` is in hand after ``waited`` seconds of waiting for it.

        :meth:`batches` calls it; a framework that fetches batches itself (the
        Lightning callback) calls it when a batch starts.
        """
        self._ready = time.perf_counter()
        self._wait.append(waited)
        if not self._batch_size:
            self._first_batch(batch)

    def step(
        self,
        loss: torch.Tensor | float,
        output: torch.Tensor | None = None,
        target: torch.Tensor | None = None,
        *,
        mask: torch.Tensor | None = None,
    ) -> None:
        """Record one optimizer update; call it after ``optimizer.step()``.

        Args:
            loss: The step's loss: a one-element tensor (kept on its device) or a float.
            output: The model's output for the batch (class scores in the last
                dimension); with ``target``, the step's training accuracy is recorded.
            target: Class indices (shape of ``output`` without its last
                dimension), or one-hot/probability targets (shape of ``output``).
                Indices equal to ``ignore_index`` do not count: a language model's
                ``(N, T, V)`` logits with ``(N, T)`` labels give the token accuracy
                over the counted tokens, and the share of positions counted.
            mask: Which positions of the input are real tokens (1) and which are
                padding (0), the shape of the class-index ``target`` (an attention
                mask, aligned with the positions the output predicts from): the
                share of padding, and the share of padding whose target counted
                in the loss, are recorded.

        Raises:
            FaultbenchError: only one of ``output`` and ``target``, shapes that
                do not match as described, or a mask without a target.
        """
        now = time.perf_counter()
        hits = None
        if output is not None or target is not None:
            hits = self._hits_of(output, target, mask)
        elif mask is not None:
            raise FaultbenchError("monitor.step(mask=...) needs the output and target too")
        value = _loss_value(loss)
        self._compute.append(now - (self._ready or now))
        if len(self._wait) < len(self._compute):  # loop not using batches()
            self._wait.append(0.0)
        self._losses.append(value)
        self._lrs.append(_rate(self.optimizer))
        if hits is not None:
            self._hits.append(hits)
            self._acc_steps.append(self._steps)
        if not self._first.done:  # a model whose own forward is not what the loop calls
            self._first.close()
        if self._steps % self.every == 0:
            self._layers.record()
            self._acts.step()
            self._attention.step()
            self._stat_steps.append(self._steps)
        self._steps += 1
        if self._steps % self.every == 0:  # the next step is recorded: measure from here
            self._layers.keep_weights()
        recorded_next = self._steps % self.every == 0
        self._acts.watch(recorded_next)  # hooks only on recorded steps
        self._attention.watch(recorded_next)

    def log_eval(
        self,
        *,
        train_acc: float,
        val_acc: float,
        val_loss: float = float("nan"),
        val_token_acc: float = float("nan"),
        step: int | None = None,
    ) -> None:
        """Record an evaluation of the weights after ``step`` updates (default:
        the latest step). Evaluations are logged in the order of their steps.

        For a language model, ``train_acc`` and ``val_acc`` are the task's accuracy (the
        answers' exact match, say) and ``val_token_acc`` the validation's token accuracy.
        """
        at = self._steps if step is None else int(step)
        if self._evals and at < self._evals[-1][0]:
            raise ValueError(
                f"log_eval(step={at}): evaluations are logged in step order, "
                f"and step {self._evals[-1][0]:.0f} was logged already"
            )
        self._evals.append((at, train_acc, val_acc, val_loss, val_token_acc))

    # -- what is recorded per step -----------------------------------------------
    def _hits_of(self, output: Any, target: Any, mask: Any = None) -> torch.Tensor:
        """[hits, counted, padded, padded and counted] of the batch, on the device (checked
        before anything is kept)."""
        if not isinstance(output, torch.Tensor) or not isinstance(target, torch.Tensor):
            raise FaultbenchError(
                f"monitor.step(output={type(output).__name__}, target={type(target).__name__}): "
                "expected both as tensors (the model's output and the batch's targets)"
            )
        out_shape, target_shape = tuple(output.shape), tuple(target.shape)
        if target.is_floating_point() and target_shape == out_shape:
            labels = target.argmax(-1)  # one-hot or probabilities
        elif not target.is_floating_point() and target_shape == out_shape[:-1]:
            labels = target
        else:
            raise FaultbenchError(
                f"monitor.step: output of shape {out_shape} and target of shape {target_shape}; "
                f"expected class indices of shape {out_shape[:-1]} or class scores of shape "
                f"{out_shape}"
            )
        counted = labels != self.ignore_index
        padding = self._padding(mask, tuple(labels.shape))
        if not self._output_classes:
            self._output_classes = classes_of(output)
        self._acc_sizes.append(labels.numel())
        self._masked.append(padding is not None)
        hits = ((output.detach().argmax(-1) == labels) & counted).sum()
        if padding is None:
            padding = torch.zeros_like(counted)
        row = [hits, counted.sum(), padding.sum(), (padding & counted).sum()]
        wide = torch.float64 if hits.device.type == "cpu" else torch.float32  # MPS has no float64
        return torch.stack(row).to(wide)

    def _padding(self, mask: Any, shape: tuple[int, ...]) -> torch.Tensor | None:
        """Where ``mask`` says padding (a boolean tensor of ``shape``), or None without one."""
        if mask is None:
            return None
        if not isinstance(mask, torch.Tensor) or tuple(mask.shape) != shape:
            got = tuple(mask.shape) if isinstance(mask, torch.Tensor) else type(mask).__name__
            raise FaultbenchError(
                f"monitor.step: mask of shape {got}; expected a tensor of the target's shape "
                f"{shape} (1 for real tokens, 0 for padding)"
            )
        return mask.detach() == 0

    def _first_batch(self, batch: Any) -> None:
        x = batch[0] if isinstance(batch, (tuple, list)) else batch
        if not isinstance(x, torch.Tensor):
            return
        self._batch_size = int(x.shape[0]) if x.dim() else 1
        if x.is_floating_point():
            x = x.detach().to(torch.promote_types(x.dtype, torch.float32))
            spread = x.std() if x.numel() > 1 else torch.zeros((), dtype=x.dtype, device=x.device)
            self._inputs.append(torch.stack([x.mean(), spread, x.abs().max()]))

    # -- results -------------------------------------------------------------------
    def config(self) -> RunConfig:
        """The observable configuration of the monitored run.

        ``n_classes`` is the last dimension of the model's first output (the
        first tensor it returns in training mode, or else the first ``output``
        given to :meth:`step`), or else the width of the last layer to run.
        ``layer_widths`` are the first layer's input width, then each layer's
        output width, in the order of the first training forward (see
        :class:`faultbench.training.widths.FirstForward` for which layers
        count and what a width is).
        """
        widths = tuple(self._first.widths)
        classes = classes_of(self._first.output) or self._output_classes
        rates = self._rates()
        return RunConfig(
            optimizer=type(self.optimizer).__name__,
            lr=float(rates.max()) if len(rates) else float(_rate(self.optimizer)),
            batch_size=self._batch_size,
            steps=self._steps,
            n_classes=classes or (widths[-1] if widths else 0),
            layer_widths=widths,
            param_count=sum(p.numel() for p in self.model.parameters()),
        )

    def trace(self) -> Trace:
        """The trace recorded so far (waits for the device once)."""
        losses = self._losses.read()[:, 0]
        steps = len(losses)
        layer_series = self._layers.series()
        recorded = len(layer_series["zero_grad_share"])
        evals = np.array(self._evals, dtype=np.float64).reshape(-1, 5)
        per_token = self._per_token(steps)
        return Trace(
            loss=losses,
            zero_grad_share=layer_series.pop("zero_grad_share"),
            inactive_share=self._acts.inactive_share(recorded),
            wait_seconds=np.array(self._wait[:steps]),
            compute_seconds=np.array(self._compute[:steps]),
            eval_steps=evals[:, 0],
            train_acc=evals[:, 1],
            val_acc=evals[:, 2],
            val_loss=evals[:, 3],
            input_stats=self._input_stats(),
            stat_steps=np.array(self._stat_steps[:recorded], dtype=np.float64),
            batch_acc=per_token["batch_acc"],
            lr=self._rates()[:steps],
            val_token_acc=evals[:, 4],
            counted_share=per_token["counted_share"],
            padding_share=per_token["padding_share"],
            padding_counted_share=per_token["padding_counted_share"],
            **layer_series,
            **self._acts.series(),
            **self._attention.series(),
            **self._layers.at_end(),
        )

    def _rates(self) -> np.ndarray:
        return np.array([float(r) for r in self._lrs], dtype=np.float64)

    def _per_token(self, steps: int) -> dict[str, np.ndarray]:
        """Per step (NaN where ``step`` got no output and target): the accuracy over the
        counted targets, the share counted, and with a mask the padding's share and the
        share of padding counted (NaN without padding)."""
        out = {
            name: np.full(steps, np.nan)
            for name in ("batch_acc", "counted_share", "padding_share", "padding_counted_share")
        }
        raw = self._hits.read()
        at = np.array(self._acc_steps[: len(raw)], dtype=np.int64)
        sizes = np.array(self._acc_sizes[: len(raw)], dtype=np.float64)
        masked = np.array(self._masked[: len(raw)], dtype=bool)
        with np.errstate(divide="ignore", invalid="ignore"):
            out["batch_acc"][at] = raw[:, HITS] / raw[:, COUNTED]
            out["counted_share"][at] = raw[:, COUNTED] / sizes
            padded = np.where(masked, raw[:, PADDED], np.nan)
            out["padding_share"][at] = padded / sizes
            out["padding_counted_share"][at] = np.where(
                padded > 0, raw[:, PADDED_COUNTED] / padded, np.nan
            )
        return out

    def _input_stats(self) -> dict[str, float]:
        values = self._inputs.read()
        row = values[0] if len(values) else np.full(len(INPUT_STATS), np.nan)
        return {name: float(v) for name, v in zip(INPUT_STATS, row)}

    def close(self) -> None:
        """Remove the hooks this monitor put on the model (the trace stays readable)."""
        self._acts.close()
        self._attention.close()
        self._first.close()


def _rate(optimizer: torch.optim.Optimizer) -> Any:
    """The first parameter group's rate now (a tensor rate is copied, never read here)."""
    lr = optimizer.param_groups[0]["lr"]
    return lr.detach().clone() if isinstance(lr, torch.Tensor) else float(lr)


def _loss_value(loss: torch.Tensor | float) -> torch.Tensor:
    """The loss as a 0-d tensor where it was computed (a float becomes a CPU one)."""
    if isinstance(loss, torch.Tensor):
        return loss.detach().reshape(())  # a one-element loss; anything bigger raises
    return torch.tensor(float(loss), dtype=torch.float64)
