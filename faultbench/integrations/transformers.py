"""Hugging Face ``Trainer``: a faultbench trace of ``Trainer.train``, and the doctor's report.

::

    from faultbench import Probe
    from faultbench.integrations.transformers import FaultbenchCallback

    callback = FaultbenchCallback(probe=Probe.from_trainer)
    trainer = Trainer(model=model, args=args, train_dataset=train, eval_dataset=val,
                      compute_metrics=metrics, callbacks=[callback])
    trainer.train()  # prints the doctor's report when training ends

The callback puts a :class:`faultbench.Monitor` on the model when training
begins and records what the Trainer computed, one step per optimizer update (so
gradient accumulation counts right), in ``on_optimizer_step``: after the update,
before the Trainer clears the gradients.

- the **loss** is what the Trainer backpropagated: the sum of what
  ``Trainer.training_step`` returned for the update's micro-batches (the sum the
  Trainer logs as its training loss), scaled however the run scaled it;
- the **logits** are those of the update's last micro-batch (a ``ModelOutput``'s
  ``logits``, read by a forward hook that changes nothing), and the **labels** and
  attention mask those of its inputs, read before ``compute_loss`` runs (a
  ``compute_loss`` of one's own may ``inputs.pop("labels")``);
- the run's **kind**: a causal language model (a class of transformers' causal-LM
  mapping, the Trainer's own test) predicts the next token, its labels shifted
  inside the model, so the step's score is the token accuracy of ``logits[:, :-1]``
  against ``labels[:, 1:]`` (the mask cut the same way); a model whose config
  declares a ``problem_type`` has that kind; otherwise the Monitor reads class
  indices (a sequence classifier: ``multiclass``). ``kind=`` overrides it;
- every **evaluation** the Trainer runs (``on_evaluate``): ``eval_loss`` as
  ``val_loss`` and each ``compute_metrics`` value as ``val_<name>`` (``train_<name>``
  for ``metric_key_prefix="train"``), through :meth:`Monitor.log_eval`; the
  Trainer's speed figures are left out;
- the **wait for data**: from the end of an update (and of the evaluation, save
  or logging after it) to the start of the next, where the Trainer fetches the
  update's micro-batches.

One callback is one job's trace: given to a second ``Trainer`` on the same model,
or used again by ``train(resume_from_checkpoint=...)``, it continues the trace and
records a :class:`Resume` in ``resumes``: where the run resumed and what came
back (the step count, the optimizer's state, the schedule's step), so a job that
lost its schedule is one trace whose rate starts over, which a diagnoser reads.

Attention statistics need a model that returns its attention weights (e.g.
``attn_implementation="eager"`` and ``output_attentions=True`` in its config;
see :mod:`faultbench.training.attention`). It needs the ``transformers`` extra:
``pip install 'faultbench[transformers]'``.
"""

from __future__ import annotations

import inspect
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

try:
    from transformers import TrainerCallback
except ImportError as exc:  # pragma: no cover - depends on the install
    raise ImportError(
        "faultbench.integrations.transformers needs Hugging Face transformers; expected it "
        "installed with: pip install 'faultbench[transformers]'"
    ) from exc
import torch
from torch import nn

from faultbench.core.errors import FaultbenchError
from faultbench.scoring.diagnosis import Diagnoser
from faultbench.scoring.run import Probe
from faultbench.tasks.kinds import Kind
from faultbench.tools.doctor import DoctorReport, doctor
from faultbench.tools.early import CHECK_EVERY, EarlyWarning
from faultbench.training.monitor import DEFAULT_EVERY, Monitor
from faultbench.training.widths import model_output

__all__ = ["FaultbenchCallback", "Resume"]

#: The Trainer's own figures in an evaluation's metrics: how fast it ran, not how well.
SPEED = (
    "runtime",
    "samples_per_second",
    "steps_per_second",
    "model_preparation_time",
    "jit_compilation_time",
)
#: A config's ``problem_type`` and the kind it is.
PROBLEM_KINDS = {
    "single_label_classification": "multiclass",
    "multi_label_classification": "multilabel",
    "regression": "regression",
}


@dataclass(frozen=True)
class Resume:
    """Where a traced job resumed, and what came back from before."""

    at_step: int  # updates in the trace before the resumed run's first one
    global_step: int  # the Trainer's update count it resumed at (0: the count started over)
    optimizer_restored: bool  # the optimizer came back with its state (or never had any)
    scheduler_step: int | None  # the schedule's step it resumed at (0: it started over;
    # None: no schedule with steps)

    @property
    def lost(self) -> tuple[str, ...]:
        """What did not come back."""
        return tuple(
            part
            for part, gone in (
                ("step count", self.global_step == 0),
                ("optimizer state", not self.optimizer_restored),
                ("schedule", self.scheduler_step == 0),
            )
            if gone
        )

    def __str__(self) -> str:
        where = f"resumed after update {self.at_step} (Trainer step {self.global_step})"
        if not self.lost:
            return f"{where}: the step count, optimizer state and schedule came back"
        return f"{where}: the {', '.join(self.lost)} did not come back"


class FaultbenchCallback(TrainerCallback):  # type: ignore[misc]
    """Records a faultbench trace of ``Trainer.train`` and prints the doctor's report.

    Args:
        diagnoser: The diagnoser the doctor runs (a registered name, ``module:Class``
            or a diagnoser object).
        probe: Lets the diagnoser and the doctor's memorization check retrain the
            model: a :class:`faultbench.Probe`, or a function of the Trainer that makes
            one when training ends (``Probe.from_trainer``); without one only the
            passive checks run.
        every: Passed to the Monitor: record the per-layer, activation and attention
            statistics every ``every`` updates (the Monitor's default, 20).
        kind: What the model predicts (:data:`faultbench.tasks.kinds.KINDS`); by default
            read from the model (see the module's text).
        show: Print the report when training ends, and each early warning when first
            raised (on the main process only).
        check_every: Ask for early warnings (:meth:`faultbench.Monitor.check`) every this
            many updates (:data:`faultbench.tools.early.CHECK_EVERY`); None: never.
        stop_on_warning: End training at the first early warning; by default a warning
            never stops the run.

    After ``train``: ``monitor`` holds the Monitor (its ``trace()`` and ``config()``),
    ``report`` the doctor's report (None if no update was made), ``resumes`` each
    :class:`Resume` of the job, ``warnings`` the early warnings of the last check.
    """

    def __init__(
        self,
        diagnoser: str | Diagnoser = "rules",
        *,
        probe: Probe | Callable[[Any], Probe] | None = None,
        every: int = DEFAULT_EVERY,
        kind: str | Kind | None = None,
        show: bool = True,
        check_every: int | None = CHECK_EVERY,
        stop_on_warning: bool = False,
    ) -> None:
        self.diagnoser = diagnoser
        self.probe = probe
        self.every = every
        self.kind = kind
        self.show = show
        self.check_every = check_every
        self.stop_on_warning = stop_on_warning
        self.warnings: list[EarlyWarning] = []
        self.monitor: Monitor | None = None
        self.report: DoctorReport | None = None
        self.resumes: list[Resume] = []
        self._shift = False  # a causal LM: its labels are shifted inside the model
        self._had_state = False  # whether the optimizer held state at the last update
        self._trainer: Any = None  # the Trainer now training, its training_step wrapped
        self._saved: Any = None  # its own training_step attribute before (None: the class's)
        self._hook: Any = None
        self._update_end = 0.0  # when the last update (and its evaluation, save, log) ended
        self._waited = 0.0  # this update's wait, measured at its start
        self._arrived = False  # whether this update's first micro-batch was noted
        self._loss: torch.Tensor | None = None  # this update's summed training_step losses
        self._logits: torch.Tensor | None = None  # the micro-batch's training forward's
        # The update's last micro-batch: its logits, labels, attention mask, and whether
        # the labels came shifted (``shift_labels``).
        self._last: tuple[torch.Tensor, torch.Tensor, Any, bool] | None = None

    # -- the Trainer's moments -------------------------------------------------------
    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """Put a Monitor on the model (or continue this job's), and start reading."""
        model, optimizer = kwargs.get("model"), kwargs.get("optimizer")
        if not isinstance(model, nn.Module) or optimizer is None:
            raise FaultbenchError(
                "FaultbenchCallback: the Trainer passed no model or optimizer to on_train_begin; "
                "expected a transformers Trainer that has built its optimizer"
            )
        optimizer = getattr(optimizer, "optimizer", optimizer)  # accelerate's wrapper
        self._stop_reading()  # a run that raised out of train() never reached on_train_end
        if self.monitor is None:
            self._shift = _is_causal_lm(model)
            self.monitor = Monitor(model, optimizer, every=self.every, kind=self._kind_of(model))
        else:
            self._resume(model, optimizer, state, kwargs.get("lr_scheduler"))
        self._trainer = _calling_trainer(self)
        self._wrap_training_step(self._trainer)
        self._hook = model.register_forward_hook(self._forward, with_kwargs=True)
        self._update_end = time.perf_counter()

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """An update starts: its micro-batches are in hand."""
        self._waited = time.perf_counter() - self._update_end
        self._arrived, self._loss, self._last = False, None, None

    def on_optimizer_step(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """Record the update: the optimizer has stepped, the gradients are still there."""
        if self.monitor is None:
            return
        self._had_state = bool(self.monitor.optimizer.state)  # also if train() raises later
        loss: torch.Tensor | float = math.nan if self._loss is None else self._loss
        if self._last is None:
            self.monitor.step(loss)
            return
        output, target, mask = self._scored(*self._last)
        self.monitor.step(loss, output, target, mask=mask)

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """The update is over (the Trainer cleared the gradients); every ``check_every``
        updates, the early warnings so far (the run stops only if asked)."""
        if (
            self.monitor is not None
            and self.check_every
            and state.global_step % self.check_every == 0
        ):
            probe = self.probe if isinstance(self.probe, Probe) else None  # not one to build
            self.warnings = self.monitor.check(
                probe=probe, show=self.show and state.is_world_process_zero
            )
            control.should_training_stop |= bool(self.warnings and self.stop_on_warning)
        self._update_end = time.perf_counter()

    def on_evaluate(
        self, args: Any, state: Any, control: Any, metrics: Any = None, **kwargs: Any
    ) -> None:
        """Record the evaluation the Trainer ran, each metric by its split and name."""
        if self.monitor is not None and isinstance(metrics, Mapping):
            named = evaluation_metrics(metrics)
            if named:
                # Every name is <split>_<metric>: none can be taken for log_eval's step.
                self.monitor.log_eval(**named)  # type: ignore[arg-type]
        self._update_end = time.perf_counter()

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """A checkpoint was written: the wait for the next update's data starts now."""
        self._update_end = time.perf_counter()

    def on_log(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """The Trainer logged: the wait for the next update's data starts now."""
        self._update_end = time.perf_counter()

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """Stop reading; diagnose the job so far and print the report."""
        trainer = self._trainer
        self._stop_reading()
        if self.monitor is None:
            return
        self.monitor.close()
        if self.monitor.trace().steps == 0:
            return
        probe = self.probe
        if probe is not None and not isinstance(probe, Probe):
            probe = probe(trainer)
        self.report = doctor(self.monitor, self.diagnoser, probe=probe)
        if self.show and getattr(state, "is_world_process_zero", True):
            print("\n".join([*(str(r) for r in self.resumes), str(self.report)]))

    # -- reading what the Trainer computed ---------------------------------------------
    def _wrap_training_step(self, trainer: Any) -> None:
        """Wrap the Trainer's ``training_step`` for this run.

        The Trainer hands a callback neither the loss it backpropagated nor the batch:
        ``training_step`` is the smallest public piece that has both (its inputs before
        ``compute_loss`` may pop the labels, and the loss it returns, scaled as the run
        scaled it). The wrapper only reads; it is the instance's own attribute while the
        run lasts, so a subclass's ``training_step`` is the one wrapped.
        """
        original = trainer.training_step
        self._saved = vars(trainer).get("training_step")

        def training_step(model: nn.Module, inputs: Any, *args: Any, **kwargs: Any) -> Any:
            target = self._micro_batch(inputs)
            loss = original(model, inputs, *args, **kwargs)
            if isinstance(loss, torch.Tensor):
                done = loss.detach()
                self._loss = done if self._loss is None else self._loss + done
            if target is not None and self._logits is not None:
                self._last = (self._logits, *target)
            self._logits = None
            return loss

        trainer.training_step = training_step

    def _stop_reading(self) -> None:
        """Put the Trainer's ``training_step`` back and take the forward hook off."""
        if self._hook is not None:
            self._hook.remove()
            self._hook = None
        trainer, self._trainer = self._trainer, None
        if trainer is None:
            return
        if self._saved is None:
            vars(trainer).pop("training_step", None)
        else:
            trainer.training_step = self._saved

    def _micro_batch(self, inputs: Any) -> tuple[torch.Tensor, Any, bool] | None:
        """Note the update's first micro-batch; the labels, mask and whether the labels
        came shifted, read before ``compute_loss`` may pop them."""
        if self.monitor is not None and not self._arrived:
            self.monitor.batch_arrived(inputs, waited=self._waited)
            self._arrived = True
        if not isinstance(inputs, Mapping):
            return None
        shifted = isinstance(inputs.get("shift_labels"), torch.Tensor)
        labels = inputs.get("shift_labels" if shifted else "labels")
        if not isinstance(labels, torch.Tensor):
            return None
        return labels, inputs.get("attention_mask"), shifted

    def _forward(self, module: nn.Module, args: Any, kwargs: dict[str, Any], out: Any) -> None:
        """Keep a training forward's logits (evaluation forwards are left)."""
        if module.training:
            logits = model_output(out)
            self._logits = logits.detach() if logits is not None else None

    def _scored(
        self, logits: torch.Tensor, labels: torch.Tensor, mask: Any, shifted: bool
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """The output and target the step's score compares, and the mask if it fits them:
        a causal LM's position t predicts token t + 1."""
        if self._shift and not shifted and logits.dim() == 3:
            logits, labels = logits[:, :-1], labels[:, 1:]
            mask = mask[:, :-1] if isinstance(mask, torch.Tensor) else None
        if not isinstance(mask, torch.Tensor) or mask.shape != labels.shape:
            mask = None
        return logits, labels, mask

    # -- one job, several runs ---------------------------------------------------------
    def _kind_of(self, model: nn.Module) -> str | Kind | None:
        if self.kind is not None:
            return self.kind
        if self._shift:
            return "next_token"
        problem = getattr(getattr(model, "config", None), "problem_type", None)
        return PROBLEM_KINDS.get(problem) if isinstance(problem, str) else None

    def _resume(self, model: nn.Module, optimizer: Any, state: Any, scheduler: Any) -> None:
        """Continue the trace on a resumed run, and note what came back."""
        assert self.monitor is not None
        if model is not self.monitor.model:
            raise FaultbenchError(
                "FaultbenchCallback: this callback traced another model object; expected the "
                "same model resumed (a Trainer given the model the callback traced, or "
                "train(resume_from_checkpoint=...)), or a new FaultbenchCallback for a new job"
            )
        step = getattr(scheduler, "last_epoch", None)
        self.resumes.append(
            Resume(
                at_step=self.monitor.config().steps,
                global_step=int(getattr(state, "global_step", 0)),
                optimizer_restored=bool(optimizer.state) or not self._had_state,
                scheduler_step=int(step) if isinstance(step, int) else None,
            )
        )
        self.monitor.resume(optimizer)


def evaluation_metrics(metrics: Mapping[str, Any]) -> dict[str, float]:
    """An evaluation's metrics as :meth:`Monitor.log_eval` names them: ``eval_loss`` ->
    ``val_loss``, ``eval_accuracy`` -> ``val_accuracy``, ``train_f1`` (an evaluation with
    ``metric_key_prefix="train"``) stays; the Trainer's speed figures, its ``epoch`` and
    anything not a number are left out."""
    named = {}
    for key, value in metrics.items():
        prefix, _, name = key.partition("_")
        if not name or name in SPEED or isinstance(value, bool):
            continue
        if isinstance(value, (int, float)) or (
            isinstance(value, torch.Tensor) and value.numel() == 1
        ):
            named[f"{'train' if prefix == 'train' else 'val'}_{name}"] = float(value)
    return named


def _is_causal_lm(model: nn.Module) -> bool:
    """Whether the model is a causal LM (it shifts its labels itself), as the Trainer tells:
    its class is one of transformers' causal-LM mapping (a PEFT model's base model's)."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    base = getattr(model, "get_base_model", None)
    inner = base() if callable(base) else model
    return type(inner).__name__ in set(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.values())


def _calling_trainer(callback: FaultbenchCallback) -> Any:
    """The Trainer whose ``train()`` is calling ``callback`` (it holds it among its
    callbacks): the frames up from ``on_train_begin``.

    A Trainer passes its callbacks the model, optimizer and data, not itself, and the
    loss it backpropagates reaches no callback; the Trainer is the caller.

    Raises:
        FaultbenchError: no Trainer holding ``callback`` is calling it.
    """
    frame = inspect.currentframe()
    try:
        while frame is not None:
            owner = frame.f_locals.get("self")
            handler = getattr(owner, "callback_handler", None)
            if any(c is callback for c in getattr(handler, "callbacks", ())):
                return owner
            frame = frame.f_back
    finally:
        del frame
    raise FaultbenchError(
        "FaultbenchCallback.on_train_begin: no transformers Trainer holding this callback is "
        "calling it; expected Trainer(..., callbacks=[callback]).train()"
    )
