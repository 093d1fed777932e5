"""``rules-v1``: the first rule set a rule writer would write, kept as it was.

Loss at the start against ln C, the share of time spent waiting for data, the
train/validation gap, and whether the loss fell. No memorization probe and no
count of weights without gradient: those came later, in ``rules``. It keeps
its row in every report however it scores, so the value of the later rules is
measured rather than claimed.
"""

from __future__ import annotations

import math

import numpy as np

from faultbench.diagnosers import _features as f
from faultbench.scoring.diagnosis import DIAGNOSERS, Diagnosis, finite_or_none
from faultbench.scoring.run import Run

START_FACTOR = 2.0  # a sane init starts near ln C
WAIT_SHARE = 0.5  # waiting more than computing
GAP = 0.5  # train accuracy this far above validation: the two disagree
STUCK = 0.5  # the loss ended above half its starting value: it did not really fall


def _end_loss(run: Run) -> float:
    losses = f.finite_losses(run)
    tail = losses[-max(1, len(losses) // 10) :]
    return float(np.mean(tail)) if len(tail) else math.nan


@DIAGNOSERS.register("rules-v1")
class RulesV1Diagnoser:
    """A first attempt: four trace rules in a fixed order, no probe."""

    name = "rules-v1"
    probes = False  # reads the trace alone
    tuned_on: frozenset[str] | set[str] = frozenset({"digits"})

    def diagnose(self, run: Run) -> Diagnosis:
        """Return the label of the first rule that fires, else ``healthy``."""
        first, end, lnc = f.first_loss(run), _end_loss(run), f.ln_c(run)
        gap = f.final_train_acc(run) - f.final_val_acc(run)
        evidence = {
            "first_loss": finite_or_none(first),
            "end_loss": finite_or_none(end),
            "ln_c": lnc,
            "wait_share": run.trace.wait_share,
            "train_val_gap": finite_or_none(gap),
        }
        return Diagnosis(self._label(run, first, end, lnc, gap), evidence=evidence)

    @staticmethod
    def _label(run: Run, first: float, end: float, lnc: float, gap: float) -> str:
        if f.nonfinite_share(run) > 0:
            return "lr_too_high"  # the loss blew up
        if first > START_FACTOR * lnc:
            return "huge_inputs"
        if run.trace.wait_share > WAIT_SHARE:
            return "starved_loader"
        if gap > GAP:
            return "label_mismatch"
        if end > STUCK * first:
            return "too_small_model"  # it cannot fit the data
        if np.nanmax(run.trace.loss[run.trace.steps // 2 :], initial=-math.inf) > first:
            return "lr_too_high"  # late losses above the start: unstable
        return "healthy"
