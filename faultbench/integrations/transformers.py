"""Hugging Face ``Trainer``: a faultbench trace of ``Trainer.train``, and the doctor's report.

::

    from faultbench.integrations.transformers import FaultbenchCallback

    trainer = Trainer(model=model, args=args, train_dataset=data, callbacks=[FaultbenchCallback()])
    trainer.train()  # prints the doctor's report when training ends

The callback puts a :class:`faultbench.Monitor` on the model when training
begins and records the same trace as the three lines of a plain loop, one step
per optimizer update (so gradient accumulation counts right): recorded in
``on_optimizer_step``, after the update and before the Trainer clears the
gradients. The Trainer hands a callback no batch and no output, so a forward
hook on the model reads what each micro-batch's forward gets and returns: the
``input_ids``, ``attention_mask`` and ``labels`` it was called with, and the
``logits`` (nothing is changed: the hook only reads).

- the **loss** of an update is the mean cross-entropy over every counted token
  of its micro-batches, computed from the logits and labels as a causal
  language model shifts them (the labels of ``-100`` do not count): the
  objective the update minimized, however the Trainer scaled it;
- the **token accuracy**, the **share of positions counted** and the
  **padding** (from the attention mask) are those of the update's last
  micro-batch, as the Lightning callback reads the batch in which the
  optimizer stepped;
- the **wait for data** is the time from the end of one update to the start
  of the next, where the Trainer fetches the update's micro-batches.

Attention statistics need a model that returns its attention weights (e.g.
``attn_implementation="eager"`` and ``output_attentions=True`` in its config;
see :mod:`faultbench.training.attention`). It needs the ``transformers`` extra:
``pip install 'faultbench[transformers]'``.
"""

from __future__ import annotations

import time
from typing import Any

try:
    from transformers import TrainerCallback
except ImportError as exc:  # pragma: no cover - depends on the install
    raise ImportError(
        "faultbench.integrations.transformers needs Hugging Face transformers; expected it "
        "installed with: pip install 'faultbench[transformers]'"
    ) from exc
import torch
import torch.nn.functional as F
from torch import nn

from faultbench.core.errors import FaultbenchError
from faultbench.scoring.diagnosis import Diagnoser
from faultbench.scoring.run import Probe
from faultbench.tools.doctor import DoctorReport, doctor
from faultbench.training.monitor import DEFAULT_EVERY, IGNORE_INDEX, Monitor

__all__ = ["FaultbenchCallback"]


class FaultbenchCallback(TrainerCallback):  # type: ignore[misc]
    """Records a faultbench trace of ``Trainer.train`` and prints the doctor's report.

    Args:
        diagnoser: The diagnoser the doctor runs (a registered name, ``module:Class``
            or a diagnoser object).
        probe: Lets the diagnoser and the doctor's memorization check retrain
            the model (see :meth:`faultbench.Probe.from_user`); without one only
            the passive checks run.
        every: Passed to the Monitor: record the per-layer, activation and attention
            statistics every ``every`` updates (the Monitor's default, 20).
        show: Print the report when training ends (on the main process only).

    After ``train``: ``monitor`` holds the Monitor (its ``trace()`` and ``config()``),
    ``report`` the doctor's report (None if no update was made).
    """

    def __init__(
        self,
        diagnoser: str | Diagnoser = "rules",
        *,
        probe: Probe | None = None,
        every: int = DEFAULT_EVERY,
        show: bool = True,
    ) -> None:
        self.diagnoser = diagnoser
        self.probe = probe
        self.every = every
        self.show = show
        self.monitor: Monitor | None = None
        self.report: DoctorReport | None = None
        self._hook: Any = None
        self._update_end = 0.0  # when the last update ended (the wait for data starts there)
        self._waited = 0.0  # this update's wait, measured at its start
        self._arrived = False  # whether this update's first micro-batch was noted
        self._loss_sum: torch.Tensor | None = None  # this update's summed token losses
        self._counted = 0  # and its counted tokens (a host int: the labels are on the host's
        # device as often as not, and the count is read once per update)
        self._last: tuple[torch.Tensor, torch.Tensor, torch.Tensor | None] | None = None

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """Put a Monitor on the model and a reading hook on its forward."""
        model, optimizer = kwargs.get("model"), kwargs.get("optimizer")
        if not isinstance(model, nn.Module) or optimizer is None:
            raise FaultbenchError(
                "FaultbenchCallback: the Trainer passed no model or optimizer to on_train_begin; "
                "expected a transformers Trainer that has built its optimizer"
            )
        optimizer = getattr(optimizer, "optimizer", optimizer)  # accelerate's wrapper
        self.monitor = Monitor(model, optimizer, every=self.every)
        self._hook = model.register_forward_hook(self._forward, with_kwargs=True)
        self._update_end = time.perf_counter()

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """An update starts: its micro-batches are in hand."""
        self._waited = time.perf_counter() - self._update_end
        self._arrived, self._loss_sum, self._counted, self._last = False, None, 0, None

    def _forward(self, module: nn.Module, args: Any, kwargs: dict[str, Any], out: Any) -> None:
        """Read one training micro-batch's inputs and logits (evaluation forwards are left)."""
        if self.monitor is None or not module.training:
            return
        logits, labels = getattr(out, "logits", None), kwargs.get("labels")
        ids = kwargs.get("input_ids", args[0] if args else None)
        if not self._arrived:
            self.monitor.batch_arrived(ids, waited=self._waited)
            self._arrived = True
        if not isinstance(logits, torch.Tensor) or not isinstance(labels, torch.Tensor):
            return
        # A causal LM's labels are its inputs: position t's logits predict token t + 1.
        logits, labels = logits[:, :-1].detach(), labels[:, 1:]
        mask = kwargs.get("attention_mask")
        mask = mask[:, :-1] if isinstance(mask, torch.Tensor) else None
        summed = F.cross_entropy(
            logits.reshape(-1, logits.shape[-1]).float(),
            labels.reshape(-1),
            ignore_index=IGNORE_INDEX,
            reduction="sum",
        )
        self._loss_sum = summed if self._loss_sum is None else self._loss_sum + summed
        self._counted += int((labels != IGNORE_INDEX).sum())
        self._last = (logits, labels, mask)

    def on_optimizer_step(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """Record the update: the optimizer has stepped, the gradients are still there."""
        if self.monitor is None:
            return
        loss: torch.Tensor | float = float("nan")
        if self._loss_sum is not None and self._counted:
            loss = self._loss_sum / self._counted
        if self._last is not None:
            logits, labels, mask = self._last
            self.monitor.step(loss, logits, labels, mask=mask)
        else:
            self.monitor.step(loss)

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """The update is over (the Trainer cleared the gradients): the next wait starts."""
        self._update_end = time.perf_counter()

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """Stop recording; diagnose the run and print the report."""
        if self._hook is not None:
            self._hook.remove()
            self._hook = None
        if self.monitor is None:
            return
        self.monitor.close()
        if self.monitor.trace().steps == 0:
            return
        self.report = doctor(self.monitor, self.diagnoser, probe=self.probe)
        if self.show and getattr(state, "is_world_process_zero", True):
            print(self.report)
