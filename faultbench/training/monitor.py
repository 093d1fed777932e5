"""Instrumentation for any PyTorch training loop, and the benchmark's own.

Three added lines in a user's loop::

    monitor = Monitor(model, optimizer)
    for xb, yb in monitor.batches(loader):   # times the wait for data
        ...; optimizer.step()
        monitor.step(loss, out, yb)          # after the update, before zero_grad

The benchmark's loop uses exactly this class, so what a diagnoser is scored on
is what it will see on a user's run.

What the task predicts (its kind: the score ``step`` records, which logged metric is
the task's score, the chance level) is declared with ``Monitor(..., kind=...)`` or
inferred from what the loop gives (:func:`infer_kind`; :attr:`Monitor.kind_reading`
says which and from what): a declared kind always wins, and the benchmark's loop
declares its task's, so the inference never touches a benchmark run.

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

import math
import time
import warnings
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from importlib import import_module
from typing import Any, TypeVar

import numpy as np
import torch
from torch import nn

from faultbench.core.errors import FaultbenchError
from faultbench.tasks.kinds import (
    CLASSES,
    DECLARE,
    LEGACY,
    LOGITS,
    LOSS_NODES,
    PROBABILITIES,
    SPLITS,
    VALUES,
    Kind,
    get_kind,
    kinds_named_by,
)
from faultbench.training.activations import ActivationWatch
from faultbench.training.attention import AttentionWatch
from faultbench.training.hostlog import DeviceLog
from faultbench.training.layers import LayerStats
from faultbench.training.trace import END_OF_RUN, RunConfig, Trace, whole_microseconds
from faultbench.training.widths import FirstForward, classes_of

B = TypeVar("B")
INPUT_STATS = ("mean", "std", "abs_max")  # of the first batch's inputs
DEFAULT_EVERY = 20  # steps between recorded per-layer and activation statistics
#: Samplings an every-step trace of the benchmark keeps counts for, so that it can be
#: read as Monitor(every=k) would have recorded it (Trace.sampled): the default among them.
SAMPLINGS = (5, 10, DEFAULT_EVERY, 50)
IGNORE_INDEX = -100  # a target that the loss skips: torch's cross_entropy default
# Per step given an output and a target: the batch score's numerator and denominator (the
# kind's: hits and counted targets for classes), the targets counted, padding positions (a
# mask given) and padding positions whose target counted.
NUMERATOR, DENOMINATOR, COUNTED, PADDED, PADDED_COUNTED = range(5)
#: Batches of targets kept (on their device) to work out the chance level and the loss an
#: untrained model starts near, when the Monitor was not given the task's targets.
TARGET_BATCHES = 50
EARLY_WARNINGS = "faultbench.tools.early"  # the module that answers Monitor.check()


class MonitorWarning(UserWarning):
    """Something the Monitor could not record, said once per monitor."""


@dataclass(frozen=True)
class KindReading:
    """The kind a Monitor reads its run as, and what said so (:attr:`Monitor.kind_reading`)."""

    kind: Kind | None  # None: nothing the Monitor was given says it
    source: str  # "declared", what it was inferred from, or why it could not be
    declared: bool = False  # given as Monitor(..., kind=...)
    likeliest: str = ""  # without a kind: the kind to declare that what was seen suggests

    @property
    def argument(self) -> str:
        """The Monitor call that states the kind (the likeliest one where none is known)."""
        name = self.kind.name if self.kind is not None else self.likeliest or "regression"
        return f'Monitor(model, optimizer, kind="{name}")'

    def describe(self) -> str:
        """One line: the kind and what it was read from, or which argument to add."""
        if self.kind is None:
            name = self.likeliest or "regression"
            others = "; ".join(f'kind="{k}" for {what}' for k, what in DECLARE.items() if k != name)
            return (
                f"unknown ({self.source}): add {self.argument} if the targets are "
                f"{DECLARE[name]}; for other targets, {others}"
            )
        if self.declared:
            return f"{self.kind.name} (declared)"
        return (
            f"{self.kind.name}, inferred from {self.source} (if it is not, state it: "
            f'Monitor(model, optimizer, kind="..."))'
        )


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
        kind: What the task predicts (:data:`faultbench.tasks.kinds.KINDS`: "multiclass",
            "binary", "multilabel", "regression", "reconstruction", "next_token"): which
            score ``step`` records and which logged metric is the task's score. None: inferred
            from what the loop gives (:attr:`kind_reading` says from what): class-index
            targets are a classifier's; the targets of an MSE, L1, Huber or SmoothL1 loss
            (read off the loss's autograd node) or other real values a regression's, or a
            reconstruction's where they are the batch's inputs; 0/1 targets against one
            logit a binary task's, a 0/1 matrix a multi-label one's; else the metric names
            given to :meth:`log_eval` (``val_r2``, ``val_f1``, ...). A step whose output and
            target say no kind records no step score and says so once. A declared kind
            always wins.
        targets: The training targets (an array), from which the chance level and the
            loss an untrained model starts near are worked out; by default the targets
            of the first :data:`TARGET_BATCHES` steps given to ``step``.
        marks: Steps (counted from 1) after which the summaries of the run so far that
            are otherwise computed at its end (weight change from the start, weights never
            given a gradient) are kept too, so that the trace can be cut there as a run
            stopped at that step would have it (:meth:`Trace.prefix`; the benchmark's
            loop marks :func:`~faultbench.training.trace.prefix_steps` of its run). Each
            mark reads the device once.

    Raises:
        FaultbenchError: ``every`` is not a whole number of steps >= 1, an
            ``also_every`` is not a multiple of it, or an unknown ``kind``.
    """

    def __init__(
        self,
        model: nn.Module,
        optimizer: torch.optim.Optimizer,
        *,
        every: int = DEFAULT_EVERY,
        also_every: Sequence[int] | None = None,
        ignore_index: int = IGNORE_INDEX,
        kind: str | Kind | None = None,
        targets: Any = None,
        marks: Sequence[int] = (),
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
        self.kind: Kind | None = None if kind is None else get_kind(kind)
        self._inferred: KindReading | None = None  # the kind a step's output and target said
        self._batch_inputs: list[torch.Tensor] = []  # until a kind is known: the last batch's
        self._probability_outputs = False  # a label kind's outputs are a sigmoid's (BCE loss)
        self._loss_read = False  # the loss's function was read (on the first scored step)
        self._targets_given = None if targets is None else np.asarray(targets)
        self._target_sample: list[torch.Tensor] = []  # the first steps' targets, kept
        self.notes: list[str] = []  # what could not be recorded, and why (each said once)
        self._hits = DeviceLog(5)  # per step given an output and target: NUMERATOR, ...
        self._acc_steps: list[int] = []  # those steps' indices
        self._acc_sizes: list[int] = []  # and their numbers of targets (positions, per token)
        self._masked: list[bool] = []  # and whether a padding mask came with them
        self._output_classes = 0  # last dimension of the first output given to step()
        self._stat_steps: list[int] = []
        self._lrs: list[Any] = []  # per step: the first parameter group's rate
        self._steps = 0
        self._wait: list[float] = []
        self._compute: list[float] = []
        self._evals: list[tuple[int, dict[str, float]]] = []
        self._inputs = DeviceLog(len(INPUT_STATS))  # the first batch's input statistics
        self._batch_size = 0
        self._ready = 0.0
        self._marks = frozenset(int(m) for m in marks)
        self._marked: dict[str, dict[str, Any]] = {}  # step -> END_OF_RUN summaries then

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
        if self._kind_at_step is None:  # a reconstruction's targets are these inputs
            self._batch_inputs = _inputs_of(batch)

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
            output: The model's output for the batch; with ``target``, the step's score
                (the kind's: accuracy, F1, R², ...) is recorded.
            target: The batch's targets as the loss takes them: class indices (the
                output's shape without its last dimension) or one-hot rows for
                classes; 0/1 floats for a binary or multi-label task; values for a
                regression. Class indices equal to ``ignore_index`` do not count: a
                language model's ``(N, T, V)`` logits with ``(N, T)`` labels give the
                token accuracy over the counted tokens, and the share counted. A
                shape the Monitor cannot read for the kind records no score for the
                step, and a warning (:class:`MonitorWarning`, and :attr:`notes`) says
                why, once.
            mask: Which positions of the input are real tokens (1) and which are
                padding (0), the shape of the class-index ``target`` (an attention
                mask, aligned with the positions the output predicts from): the
                share of padding, and the share of padding whose target counted
                in the loss, are recorded.

        Raises:
            FaultbenchError: only one of ``output`` and ``target``, either not a tensor,
                or a mask without a target or of another shape.
        """
        now = time.perf_counter()
        row = None
        if output is not None or target is not None:
            row = self._score_of(output, target, mask, loss)
        elif mask is not None:
            raise FaultbenchError("monitor.step(mask=...) needs the output and target too")
        value = _loss_value(loss)
        self._compute.append(now - (self._ready or now))
        if len(self._wait) < len(self._compute):  # loop not using batches()
            self._wait.append(0.0)
        self._losses.append(value)
        self._lrs.append(_rate(self.optimizer))
        if row is not None:
            self._hits.append(row)
            self._acc_steps.append(self._steps)
        if not self._first.done:  # a model whose own forward is not what the loop calls
            self._first.close()
        if self._steps % self.every == 0:
            self._layers.record()
            self._acts.step()
            self._attention.step()
            self._stat_steps.append(self._steps)
        self._steps += 1
        if self._steps in self._marks:
            summaries = self._layers.at_end()
            self._marked[str(self._steps)] = {name: summaries[name] for name in END_OF_RUN}
        if self._steps % self.every == 0:  # the next step is recorded: measure from here
            self._layers.keep_weights()
        recorded_next = self._steps % self.every == 0
        self._acts.watch(recorded_next)  # hooks only on recorded steps
        self._attention.watch(recorded_next)

    def log_eval(self, *, step: int | None = None, **metrics: float) -> None:
        """Record an evaluation of the weights after ``step`` updates (default: the latest
        step). Evaluations are logged in the order of their steps.

        Name each metric ``<split>_<metric>``, the split ``train`` or ``val``:
        ``log_eval(train_r2=0.93, val_r2=0.88, val_mae=0.31, val_loss=0.12)``. The
        metric's direction is known from its name (:data:`faultbench.tasks.kinds.METRICS`:
        accuracy, f1, auc, r2, exact_match, token_acc are better higher; mae, mse, rmse and
        loss lower); ``val_<score>`` of the Monitor's kind is the task's score
        (:attr:`Trace.val_acc`). ``train_acc`` and ``val_acc`` are the task's score
        whatever the kind (a classifier's accuracy, a language model's exact match), as the
        first Monitor took them; ``val_token_acc``, a sequence model's teacher-forced
        token accuracy.

        Raises:
            FaultbenchError: a metric named without a split, or a value that is not a number.
            ValueError: an evaluation logged at a step before the last one logged.
        """
        at = self._steps if step is None else int(step)
        if self._evals and at < self._evals[-1][0]:
            raise ValueError(
                f"log_eval(step={at}): evaluations are logged in step order, "
                f"and step {self._evals[-1][0]:.0f} was logged already"
            )
        named: dict[str, float] = {}
        for name, value in metrics.items():
            if name.partition("_")[0] not in SPLITS:
                raise FaultbenchError(
                    f"log_eval({name}=...): expected a metric named <split>_<metric>, the split "
                    f"one of {', '.join(SPLITS)} (val_r2, train_f1, val_loss)"
                )
            try:
                number = float(value)
            except (TypeError, ValueError):
                raise FaultbenchError(f"log_eval({name}={value!r}): expected a number") from None
            named[name] = number  # named as logged: the kind may be known only later
        self._evals.append((at, named))

    def _metric_name(self, name: str) -> str:
        """The stored name of a logged metric: ``train_acc``/``val_acc`` are the score's."""
        if name in ("train_acc", "val_acc"):
            return f"{name.partition('_')[0]}_{self._score_name()}"
        return LEGACY.get(name, name)

    def _score_name(self) -> str:
        kind = self._kind_read
        return kind.score if kind is not None else "accuracy"

    @property
    def kind_reading(self) -> KindReading:
        """The kind this run is read as and from what: declared, inferred from a step's
        output, target and loss, or from the metric names logged; or, where nothing says
        it, why not and the likeliest kind to declare."""
        if self.kind is not None:
            return KindReading(self.kind, "declared", declared=True)
        if self._inferred is not None:
            return self._inferred
        return self._kind_from_metrics()

    @property
    def _kind_read(self) -> Kind | None:
        return self.kind_reading.kind

    @property
    def _kind_at_step(self) -> Kind | None:
        """The kind a step is scored as: declared, or said by an earlier step."""
        if self.kind is not None:
            return self.kind
        return self._inferred.kind if self._inferred is not None else None

    def _kind_from_metrics(self) -> KindReading:
        """The kind the logged metrics' names say, or why none is known."""
        logged = list(dict.fromkeys(name for _, named in self._evals for name in named))
        kinds = kinds_named_by(logged)
        if kinds:
            telling = [n for n in logged if kinds_named_by([n])]
            return KindReading(get_kind(kinds[0]), "the metrics logged: " + ", ".join(telling))
        seen = []
        if self.notes:
            seen.append("monitor.step's output and target say none")
        elif not self._target_sample:
            seen.append("monitor.step got no output and target")
        seen.append(
            "log_eval logged " + ", ".join(logged) + ", none of them a kind's own metric"
            if logged
            else "log_eval logged nothing"
        )
        return KindReading(None, "; ".join(seen), likeliest=self._likeliest(logged))

    def _likeliest(self, logged: list[str]) -> str:
        """Without a kind: the one to suggest, from the targets seen (float: values)."""
        if self._target_sample:
            return "regression" if self._target_sample[0].is_floating_point() else "multiclass"
        if any(name.endswith("_acc") or name.endswith("_accuracy") for name in logged):
            return "multiclass"
        return "regression"

    # -- what is recorded per step -----------------------------------------------
    def _score_of(
        self, output: Any, target: Any, mask: Any = None, loss: Any = None
    ) -> torch.Tensor | None:
        """The batch's [numerator, denominator, counted, padded, padded and counted] on the
        device, or None (said once) where the shapes cannot be read for the kind."""
        if not isinstance(output, torch.Tensor) or not isinstance(target, torch.Tensor):
            raise FaultbenchError(
                f"monitor.step(output={type(output).__name__}, target={type(target).__name__}): "
                "expected both as tensors (the model's output and the batch's targets)"
            )
        if not self._output_classes:
            self._output_classes = classes_of(output)
        if self._targets_given is None and len(self._target_sample) < TARGET_BATCHES:
            self._target_sample.append(target.detach())
        kind, why = self._readable(output, target, loss)
        if kind is None:
            self._note(why)
            if mask is not None:
                self._padding(mask, tuple(target.shape))  # a malformed mask is still an error
            return None
        if not self._loss_read:
            self._loss_read = True
            labels = kind.name in ("binary", "multilabel")
            self._probability_outputs = labels and _loss_of(loss)[0] == PROBABILITIES
        if target.is_floating_point() and not kind.float_targets:
            target = target.argmax(-1)  # one-hot or probability rows of classes
        if self._probability_outputs:  # a sigmoid's output: a label is predicted above 0.5
            output = output.detach() - 0.5
        parts = kind.step_parts(output, target)
        size = target.numel()
        self._acc_sizes.append(size)
        counted = target != self.ignore_index if not kind.float_targets else None
        padding = self._padding(mask, tuple(target.shape))
        self._masked.append(padding is not None)
        if padding is None or counted is None:
            zero = torch.zeros((), dtype=parts.dtype, device=parts.device)
            return torch.cat([parts, torch.stack([zero, zero])])
        extra = torch.stack([padding.sum(), (padding & counted).sum()]).to(parts.dtype)
        return torch.cat([parts, extra])

    def _readable(
        self, output: torch.Tensor, target: torch.Tensor, loss: Any = None
    ) -> tuple[Kind | None, str]:
        """The kind a step's output and target are read as, or None and why not."""
        out, tgt = tuple(output.shape), tuple(target.shape)
        kind = self._kind_at_step
        if kind is None:
            reading = infer_kind(output, target, loss, self._batch_inputs)
            if reading.kind is None:
                return None, (
                    f"monitor.step: output {out} and target {tgt} ({target.dtype}) say no "
                    f"kind ({reading.source}); no step score is recorded. Pass "
                    f"{reading.argument} (or another kind: "
                    + ", ".join(DECLARE)
                    + ") so that it knows what the targets are"
                )
            self._inferred, self._batch_inputs = reading, []
            return reading.kind, ""
        if not kind.float_targets:
            if not target.is_floating_point() and tgt == out[:-1]:
                return kind, ""
            if target.is_floating_point() and tgt == out and len(out) >= 2:
                return kind, ""
            expected = f"class indices of shape {out[:-1]} or class scores of shape {out}"
        elif kind.name == "multilabel":
            if tgt == out:
                return kind, ""
            expected = f"0/1 labels of the output's shape {out}"
        else:  # binary, regression, reconstruction: one value per output value
            if target.numel() == output.numel() and tgt[:1] == out[:1]:
                return kind, ""
            expected = f"{output.numel()} target values, {out[0] if out else 1} rows (shape {out})"
        return None, (
            f"monitor.step: a {kind.name} output of shape {out} and target of shape {tgt}; "
            f"expected {expected}; no step score is recorded for such steps"
        )

    def _note(self, why: str) -> None:
        if why not in self.notes:
            self.notes.append(why)
            warnings.warn(why, MonitorWarning, stacklevel=4)

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
        # A batch is (inputs, targets), a dict, or the inputs alone; the inputs may be
        # several tensors (a model of two inputs): the first float one is read.
        inputs = batch[0] if isinstance(batch, (tuple, list)) and len(batch) == 2 else batch
        tensors = _tensors(inputs)
        if not tensors:
            return
        self._batch_size = int(tensors[0].shape[0]) if tensors[0].dim() else 1
        floats = [t for t in tensors if t.is_floating_point() and t.numel()]
        if floats:
            x = floats[0]
            x = x.detach().to(torch.promote_types(x.dtype, torch.float32))
            spread = x.std() if x.numel() > 1 else torch.zeros((), dtype=x.dtype, device=x.device)
            self._inputs.append(torch.stack([x.mean(), spread, x.abs().max()]))

    # -- results -------------------------------------------------------------------
    def config(self) -> RunConfig:
        """The observable configuration of the monitored run.

        ``n_classes`` is the last dimension of the model's first output (the
        first tensor it returns in training mode, or else the first ``output``
        given to :meth:`step`), or else the width of the last layer to run: the
        classes, or the outputs of another kind. ``layer_widths`` are the first
        layer's input width, then each layer's output width, in the order of the
        first training forward (see :class:`faultbench.training.widths.FirstForward`
        for which layers count and what a width is). The chance level and the loss
        reference are the kind's (:class:`faultbench.tasks.kinds.Kind`) on the
        targets given to the Monitor, or else on those of the first steps; NaN when
        the kind is not known or no target was seen.
        """
        widths = tuple(self._first.widths)
        classes = classes_of(self._first.output) or self._output_classes
        outputs = classes or (widths[-1] if widths else 0)
        rates = self._rates()
        chance = reference = math.nan
        targets, kind = self._targets(), self._kind_read
        if kind is not None and targets is not None and len(targets):
            chance = kind.chance(targets)
            reference = kind.loss_reference(targets, outputs)
        elif kind is not None and kind.score == "r2":  # the mean predictor's, whatever the targets
            chance = kind.chance(np.zeros(0))
        return RunConfig(
            optimizer=type(self.optimizer).__name__,
            lr=float(rates.max()) if len(rates) else float(_rate(self.optimizer)),
            batch_size=self._batch_size,
            steps=self._steps,
            n_classes=outputs,
            layer_widths=widths,
            param_count=sum(p.numel() for p in self.model.parameters()),
            kind=kind.name if kind is not None else "",
            score=self._score_name(),
            chance=chance,
            loss_reference=reference,
        )

    def _targets(self) -> np.ndarray | None:
        """The targets the chance level is read from (given, or the first steps')."""
        if self._targets_given is not None:
            return self._targets_given
        if not self._target_sample:
            return None
        try:
            joined = torch.cat(
                [t.reshape(len(t), -1) if t.dim() else t[None, None] for t in self._target_sample]
            )
        except RuntimeError:  # batches of different widths (sequences of other lengths)
            joined = torch.cat([t.reshape(-1) for t in self._target_sample])
        flat = joined.cpu().numpy()
        return (
            flat[:, 0]
            if flat.ndim == 2 and flat.shape[1] == 1 and not joined.is_floating_point()
            else flat
        )

    def trace(self) -> Trace:
        """The trace recorded so far (waits for the device once)."""
        losses = self._losses.read()[:, 0]
        steps = len(losses)
        layer_series = self._layers.series()
        recorded = len(layer_series["zero_grad_share"])
        per_token = self._per_token(steps)
        metrics = self._metric_series()
        score = self._score_name()
        evals = len(self._evals)
        nan = np.full(evals, np.nan)
        return Trace(
            loss=losses,
            zero_grad_share=layer_series.pop("zero_grad_share"),
            inactive_share=self._acts.inactive_share(recorded),
            wait_seconds=whole_microseconds(self._wait[:steps]),
            compute_seconds=whole_microseconds(self._compute[:steps]),
            eval_steps=np.array([at for at, _ in self._evals], dtype=np.float64),
            train_acc=metrics.get(f"train_{score}", nan),
            val_acc=metrics.get(f"val_{score}", nan),
            val_loss=metrics.get("val_loss", nan),
            input_stats=self._input_stats(),
            stat_steps=np.array(self._stat_steps[:recorded], dtype=np.float64),
            batch_acc=per_token["batch_acc"],
            lr=self._rates()[:steps],
            val_token_acc=metrics.get("val_token_acc", nan),
            counted_share=per_token["counted_share"],
            padding_share=per_token["padding_share"],
            padding_counted_share=per_token["padding_counted_share"],
            metrics=metrics,
            at_steps={step: dict(marked) for step, marked in self._marked.items()},
            **layer_series,
            **self._acts.series(),
            **self._attention.series(),
            **self._layers.at_end(),
        )

    def _metric_series(self) -> dict[str, np.ndarray]:
        """Every logged metric's values, one per evaluation (NaN where it was not logged),
        under its stored name (the score's for ``train_acc``/``val_acc``, by the kind read
        now)."""
        evals = [
            {self._metric_name(name): value for name, value in logged.items()}
            for _, logged in self._evals
        ]
        names = list(dict.fromkeys(name for logged in evals for name in logged))
        return {
            name: np.array([logged.get(name, np.nan) for logged in evals], np.float64)
            for name in names
        }

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
            out["batch_acc"][at] = raw[:, NUMERATOR] / raw[:, DENOMINATOR]
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

    def check(self, *, probe: Any = None, show: bool = True, stop: bool = False) -> list[Any]:
        """The doctor's early warnings on the run so far: each names a fault, its evidence
        (how unusual it is against healthy runs) and the fix to try
        (:func:`faultbench.tools.early.check`, which this calls).

        Args:
            probe: A :class:`faultbench.Probe` of the run: a warning is then raised only if
                trying its fix for a few probe steps measurably helps.
            show: Print each warning the first time it is raised (to stderr).
            stop: Raise :class:`faultbench.tools.early.StopTraining` on a warning, so the
                loop can end there; by default a warning never stops the run.

        Returns:
            The warnings that hold on the run so far (:class:`faultbench.tools.early.EarlyWarning`).
        """
        # The doctor's checks read a Run and live in the layers above this one; they are
        # found by name on the first call, as a registry finds its shipped entries.
        return import_module(EARLY_WARNINGS).check(self, probe=probe, show=show, stop=stop)

    def resume(self, optimizer: torch.optim.Optimizer | None = None) -> None:
        """Continue this trace, after :meth:`close`, on a run resumed on the same model (from
        a checkpoint, or in a new Trainer): its hooks return, the next update is measured
        from the weights now (a checkpoint may have put back older ones), and the rate is
        read from ``optimizer``, the resumed run's (by default the one before)."""
        if optimizer is not None:
            self.optimizer = optimizer
        self._layers.measure_from_now()
        recorded_next = self._steps % self.every == 0
        self._acts.reopen(recorded_next)
        self._attention.reopen(recorded_next)

    def close(self) -> None:
        """Remove the hooks this monitor put on the model (the trace stays readable)."""
        self._acts.close()
        self._attention.close()
        self._first.close()


def _tensors(value: Any) -> list[torch.Tensor]:
    """The tensors in a batch's inputs (a tensor, or nested tuples, lists and dicts), in order."""
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, (tuple, list)):
        return [t for item in value for t in _tensors(item)]
    return []


def _inputs_of(batch: Any) -> list[torch.Tensor]:
    """The float tensors a batch feeds the model: the first item of a tuple or list (its
    inputs; the rest are targets), a dict's entries other than its labels, or the batch."""
    if isinstance(batch, (tuple, list)) and batch:
        batch = batch[0]
    elif isinstance(batch, dict):
        batch = {k: v for k, v in batch.items() if k not in ("labels", "label", "targets", "y")}
    return [t for t in _tensors(batch) if t.is_floating_point()]


# -- the kind a step says ------------------------------------------------------------

#: How far up a loss's autograd graph its loss function is looked for: a loss scaled or
#: summed with a penalty (``0.5 * mse + l2``) has it a node or two below the top.
LOSS_DEPTH = 4


def infer_kind(
    output: torch.Tensor,
    target: torch.Tensor,
    loss: Any = None,
    inputs: Sequence[torch.Tensor] = (),
) -> KindReading:
    """The kind that a step's ``output``, ``target`` and ``loss`` say, and from what.

    Class-index targets (the output's shape without its last dimension, two or more
    outputs) and float rows that sum to 1 are a classifier's, as ever. Other targets need
    one per output value; then the loss's function, read off its autograd node, says
    what they are (an MSE, L1, Huber or SmoothL1 loss: values; a binary cross-entropy:
    labels), or else their values do (0/1: labels; others: values). Labels are binary
    against one output per example, multi-label against a matrix of the output's shape;
    values are a reconstruction's where they are one of the batch's ``inputs``, else a
    regression's. Reads the device once or twice (the step that decides, only).
    """
    out, tgt = tuple(output.shape), tuple(target.shape)
    floats = target.is_floating_point()
    if not floats and len(out) >= 2 and tgt == out[:-1] and out[-1] >= 2:
        return KindReading(get_kind("multiclass"), f"class-index targets {tgt} for outputs {out}")
    if floats and len(out) >= 2 and tgt == out and out[-1] >= 2 and _rows_sum_to_1(target):
        return KindReading(get_kind("multiclass"), "targets that are rows of class probabilities")
    if target.numel() != output.numel() or tgt[:1] != out[:1]:
        classes = len(out) >= 2 and tgt == out[:-1]
        return KindReading(
            None,
            "class indices must be integers" if classes else "not one target per output value",
            likeliest="multiclass" if classes or not floats else "regression",
        )
    family, loss_name = _loss_of(loss)
    if family == CLASSES:
        return KindReading(
            None, f"{loss_name} but targets that are no class indices", likeliest="multiclass"
        )
    if family in (LOGITS, PROBABILITIES):
        return _labels(out, tgt, f"the targets of {loss_name}")
    if family == VALUES:
        return _values(target, inputs, f"the float targets of {loss_name}")
    if _zero_one(target):
        return _labels(out, tgt, "0/1 targets")
    return _values(target, inputs, "real-valued targets")


def _labels(out: tuple[int, ...], tgt: tuple[int, ...], said_by: str) -> KindReading:
    per_example = math.prod(out[1:]) if len(out) >= 2 else 1
    if per_example == 1:
        return KindReading(get_kind("binary"), f"{said_by} against one output per example")
    if tgt == out:
        return KindReading(get_kind("multilabel"), f"{said_by}: a 0/1 matrix {tgt}")
    return KindReading(None, f"{said_by} of shape {tgt} for outputs {out}", likeliest="multilabel")


def _values(target: torch.Tensor, inputs: Sequence[torch.Tensor], said_by: str) -> KindReading:
    if any(_same_values(x, target) for x in inputs):
        return KindReading(get_kind("reconstruction"), f"{said_by} that are the batch's inputs")
    return KindReading(get_kind("regression"), said_by)


def _loss_of(loss: Any) -> tuple[str, str]:
    """What the targets of ``loss``'s function are (:data:`~faultbench.tasks.kinds.LOSS_NODES`)
    and its name, found within :data:`LOSS_DEPTH` nodes of the top; ``("", "")`` for a float,
    a detached loss or one written out by hand, except the mean of an absolute or squared
    difference (an L1 or MSE loss spelled out)."""
    node = getattr(loss, "grad_fn", None)
    level = [node] if node is not None else []
    for _ in range(LOSS_DEPTH):
        for node in level:
            name = type(node).__name__
            if name in LOSS_NODES:
                return LOSS_NODES[name]
            below = [type(n).__name__ for n, _ in node.next_functions if n is not None]
            if name in ("AbsBackward0", "PowBackward0") and "SubBackward0" in below:
                return VALUES, "an L1 loss" if name == "AbsBackward0" else "a squared error"
        level = [n for node in level for n, _ in node.next_functions if n is not None]
    return "", ""


def _zero_one(target: torch.Tensor) -> bool:
    """Whether every target is 0 or 1 (read back once, on the step that decides the kind)."""
    t = target.detach()
    return bool(((t == 0) | (t == 1)).all().item())


def _same_values(x: torch.Tensor, target: torch.Tensor) -> bool:
    """Whether ``target`` is the input ``x`` (the same tensor, or the same values)."""
    if x is target:
        return True
    if x.shape != target.shape or x.dtype != target.dtype:
        return False
    return bool(torch.equal(x.detach().to(target.device), target.detach()))


def _rows_sum_to_1(target: torch.Tensor) -> bool:
    """Whether float targets are rows of class probabilities (one-hot included): read back
    once, on the step that first needs it."""
    t = target.detach()
    return bool(((t >= 0).all() & ((t.sum(-1) - 1).abs() < 1e-3).all()).item())


def _rate(optimizer: torch.optim.Optimizer) -> Any:
    """The first parameter group's rate now (a tensor rate is copied, never read here)."""
    lr = optimizer.param_groups[0]["lr"]
    return lr.detach().clone() if isinstance(lr, torch.Tensor) else float(lr)


def _loss_value(loss: torch.Tensor | float) -> torch.Tensor:
    """The loss as a 0-d tensor where it was computed (a float becomes a CPU one)."""
    if isinstance(loss, torch.Tensor):
        return loss.detach().reshape(())  # a one-element loss; anything bigger raises
    return torch.tensor(float(loss), dtype=torch.float64)
