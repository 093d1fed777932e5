"""PyTorch Lightning: a faultbench trace of ``Trainer.fit``, and the doctor's report at the end.

::

    from faultbench.integrations.lightning import FaultbenchCallback

    trainer = lightning.Trainer(callbacks=[FaultbenchCallback()])
    trainer.fit(model, train_loader)  # prints the doctor's report when training ends

The callback puts a :class:`faultbench.Monitor` on the LightningModule when
training starts (the module is on its device and the optimizers exist by
then) and records the same trace as the three lines of a plain loop: the wait
for each batch (from the end of one batch to the start of the next, where
Lightning fetches data), one step per batch in which an optimizer stepped
(so gradient accumulation and skipped AMP steps count right), the loss
``training_step`` returned, and, when it returns ``{"loss": ..., "output":
logits}`` and the batch is ``(inputs, targets, ...)``, the training accuracy.
Every ``check_every`` optimizer updates it asks the doctor's passive checks on the run
so far (:meth:`faultbench.Monitor.check`): a warning names the fault, its evidence and
the fix, and stops the run only with ``stop_on_warning=True``.
It needs the ``lightning`` extra: ``pip install 'faultbench[lightning]'``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from typing import Any

try:
    import lightning.pytorch as pl
except ImportError as exc:  # pragma: no cover - depends on the install
    raise ImportError(
        "faultbench.integrations.lightning needs PyTorch Lightning; expected it installed "
        "with: pip install 'faultbench[lightning]'"
    ) from exc
import torch

from faultbench.core.errors import FaultbenchError
from faultbench.scoring.diagnosis import Diagnoser
from faultbench.scoring.run import Probe
from faultbench.tools.doctor import DoctorReport, doctor
from faultbench.tools.early import CHECK_EVERY, EarlyWarning
from faultbench.training.monitor import DEFAULT_EVERY, Monitor

__all__ = ["FaultbenchCallback"]


class FaultbenchCallback(pl.Callback):
    """Records a faultbench trace of ``Trainer.fit`` and prints the doctor's report.

    Args:
        diagnoser: The diagnoser the doctor runs (a registered name, ``module:Class``
            or a diagnoser object).
        probe: Lets the diagnoser and the doctor's memorization check retrain
            the model (see :meth:`faultbench.Probe.from_user`); without one only
            the passive checks run.
        every: Passed to the Monitor: record the per-layer and activation statistics every
            ``every`` steps (the Monitor's default, 20).
        show: Print the report when training ends, and each early warning when first
            raised (on the main process only).
        kind: What the task predicts, passed to the Monitor (``"regression"``, ...).
        check_every: Ask for early warnings every this many optimizer updates
            (:data:`faultbench.tools.early.CHECK_EVERY`); None: never.
        stop_on_warning: End ``fit`` at the first early warning (``trainer.should_stop``).

    After ``fit``: ``monitor`` holds the Monitor (its ``trace()`` and
    ``config()``), ``report`` the doctor's report (None if no step was made),
    ``warnings`` the early warnings of the last check.
    """

    def __init__(
        self,
        diagnoser: str | Diagnoser = "rules",
        *,
        probe: Probe | None = None,
        every: int = DEFAULT_EVERY,
        show: bool = True,
        kind: str | None = None,
        check_every: int | None = CHECK_EVERY,
        stop_on_warning: bool = False,
    ) -> None:
        self.diagnoser = diagnoser
        self.probe = probe
        self.every = every
        self.show = show
        self.kind = kind
        self.check_every = check_every
        self.stop_on_warning = stop_on_warning
        self.monitor: Monitor | None = None
        self.report: DoctorReport | None = None
        self.warnings: list[EarlyWarning] = []
        self._updates = 0  # optimizer updates recorded
        self._stepped = False  # whether an optimizer stepped during this batch
        self._batch_end = 0.0  # when the last batch ended (the data wait starts there)
        self._handles: list[Any] = []

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """Put a Monitor on the module and watch its optimizers' steps."""
        if not trainer.optimizers:
            raise FaultbenchError(
                "FaultbenchCallback: the Trainer has no optimizer; expected configure_optimizers() "
                "to return at least one"
            )
        self.monitor = Monitor(pl_module, trainer.optimizers[0], every=self.every, kind=self.kind)
        self._handles = [
            opt.register_step_post_hook(self._optimizer_stepped) for opt in trainer.optimizers
        ]
        self._batch_end = time.perf_counter()

    def _optimizer_stepped(self, *_: Any) -> None:
        self._stepped = True

    def on_train_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        """A batch is in hand: the time since the last one ended was spent waiting for it."""
        if self.monitor is not None:
            self.monitor.batch_arrived(batch, waited=time.perf_counter() - self._batch_end)

    def on_train_batch_end(
        self,
        trainer: pl.Trainer,
        pl_module: pl.LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
    ) -> None:
        """Record a step if an optimizer stepped during this batch."""
        if self.monitor is not None and self._stepped:
            loss, output = _loss_and_output(outputs)
            target = _target(batch) if output is not None else None
            if output is not None and target is not None:
                self.monitor.step(loss, output, target)
            else:
                self.monitor.step(loss)
            self._updates += 1
            if self.check_every and self._updates % self.check_every == 0:
                self._check(trainer)
        self._stepped = False
        self._batch_end = time.perf_counter()

    def _check(self, trainer: pl.Trainer) -> None:
        """The early warnings so far; the run stops only if the user asked."""
        assert self.monitor is not None
        self.warnings = self.monitor.check(
            probe=self.probe, show=self.show and trainer.is_global_zero
        )
        if self.warnings and self.stop_on_warning:
            trainer.should_stop = True

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """Stop recording; diagnose the run and print the report."""
        for handle in self._handles:
            handle.remove()
        self._handles = []
        if self.monitor is None:
            return
        self.monitor.close()
        if self.monitor.trace().steps == 0:
            return
        self.report = doctor(self.monitor, self.diagnoser, probe=self.probe)
        if self.show and trainer.is_global_zero:
            print(self.report)


def _loss_and_output(outputs: Any) -> tuple[torch.Tensor | float, torch.Tensor | None]:
    """The loss (NaN when ``training_step`` returned none) and the ``output`` entry, if any."""
    if isinstance(outputs, torch.Tensor):
        return outputs, None
    if isinstance(outputs, Mapping):
        loss = outputs.get("loss")
        output = outputs.get("output")
        return (
            loss if isinstance(loss, torch.Tensor) else math.nan,
            output if isinstance(output, torch.Tensor) else None,
        )
    return math.nan, None


def _target(batch: Any) -> torch.Tensor | None:
    """The targets of an ``(inputs, targets, ...)`` batch."""
    if isinstance(batch, (tuple, list)) and len(batch) >= 2 and isinstance(batch[1], torch.Tensor):
        return batch[1]
    return None
