"""Is a run sound? The checks whose failure means the run itself is broken, not the machine.

A diagnoser names a fault; these checks read the run directly, and the doctor's
headline (:mod:`faultbench.tools.doctor`) lets a failed one overrule a
"healthy" answer: a run whose validation accuracy falls or ends at chance, or
whose model cannot memorize a small batch, is never called healthy. They live
here, below the diagnosers, so that the doctor's headline can itself be scored
as a diagnoser (``faultbench.diagnosers.doctor``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from faultbench.scoring.diagnosis import Diagnosis
from faultbench.scoring.run import Run

PASS, FAIL, UNMEASURED = "pass", "fail", "not measured"
HEALTHY = "healthy"
NOT_HEALTHY = "not healthy"  # the headline when a check refutes a "healthy" answer
UNDECIDED = "undecided"  # the headline when the run recorded no accuracy at all
#: The checks whose failure means the run itself is unsound (not the machine).
SOUNDNESS = ("memorizes a small batch", "validation improves")
MEMORIZE_EXAMPLES = 16  # a batch small enough that any working model can memorize it
MEMORIZE_STEPS = 300  # probe steps allowed to memorize that batch
MEMORIZED = 0.1  # memorized: the batch's loss down to this share of its start, for any kind
CHANCE_SLACK = 1e-6  # float32 rounding of an accuracy: 80/400 is stored as 0.2000000030
VAL_SLACK = 0.02  # how far below its best a run's last validation accuracy may end: noise


@dataclass(frozen=True)
class Check:
    """One line of the upgrade checklist."""

    name: str  # what must hold before a bigger machine makes sense
    measured: str  # the value found, or why none could be
    threshold: str  # what passing means
    verdict: str  # "pass", "fail" or "not measured"


def verdict_of(diagnosis: Diagnosis, checks: tuple[Check, ...], run: Run) -> tuple[str, str]:
    """The headline and, where it overrules the diagnosis, why.

    A soundness check that fails refutes a "healthy" answer (NOT_HEALTHY). A
    run with no accuracy recorded at all cannot be told healthy or not by the
    checks that need one, so it is NOT_HEALTHY if another soundness check
    failed, else UNDECIDED, whatever was answered: the reason names the checks
    that could not run instead of passing on a guess.
    """
    failed = [c for c in checks if c.name in SOUNDNESS and c.verdict == FAIL]
    why = "; ".join(f"{c.name}: {c.measured}" for c in failed)
    if not _has_accuracy(run):
        skipped = [
            c.name for c in checks if c.name in SOUNDNESS and c.verdict.startswith(UNMEASURED)
        ]
        blind = (
            "no accuracy was recorded (neither monitor.log_eval(...) nor "
            "monitor.step(loss, output=..., target=...)), so these checks could not run: "
            + ", ".join(skipped)
        )
        return (NOT_HEALTHY, f"{why}; and {blind}") if failed else (UNDECIDED, blind)
    if diagnosis.label == HEALTHY and failed:
        return NOT_HEALTHY, why
    return diagnosis.label, ""


def _has_accuracy(run: Run) -> bool:
    # Batch accuracies count: the three-line loop gives Monitor.step its output and target.
    values = np.concatenate([run.trace.train_acc, run.trace.val_acc, run.trace.batch_acc])
    return bool(np.isfinite(values).any())


def memorize_check(run: Run, evidence: Mapping[str, Any] | None = None) -> Check:
    """Can a fresh copy of the model reach 100% on a tiny batch through the probe?

    When the diagnoser ran a memorization probe of its own and reports it as
    ``evidence["memorization"]["memorized"]``, that result is the line: one
    probe, one answer, so the evidence and the checklist cannot disagree.
    """
    name = "memorizes a small batch"
    reported = (evidence or {}).get("memorization")
    if isinstance(reported, Mapping) and isinstance(reported.get("memorized"), bool):
        steps = reported.get("steps")
        spent = f" in {steps} probe steps" if isinstance(steps, int) else ""
        done = "memorized" if reported["memorized"] else "not memorized"
        return Check(
            name,
            f"{done}{spent} (the diagnoser's probe)",
            "the diagnoser's memorization probe succeeds",
            PASS if reported["memorized"] else FAIL,
        )
    threshold = (
        f"loss on {MEMORIZE_EXAMPLES} examples down to {MEMORIZED:g} x its start "
        f"in {MEMORIZE_STEPS} steps"
    )
    if run.probe is None:
        return Check(name, "no probe", threshold, UNMEASURED + ": no probe")
    X, y = run.probe.train_data(MEMORIZE_EXAMPLES)
    model = run.probe.make_model()
    model.train()
    # The run's own learning rate: memorizing fails at a rate the loop cannot use either.
    optimizer = torch.optim.Adam(model.parameters(), lr=run.config.lr)
    start = value = math.nan
    for step in range(1, MEMORIZE_STEPS + 1):
        optimizer.zero_grad()
        loss = run.probe.loss(run.probe.forward(model, X), y)
        value = float(loss.detach())
        start = value if step == 1 else start
        if not math.isfinite(value):
            break
        if value <= MEMORIZED * start:
            return Check(name, f"loss {start:.3g} -> {value:.3g} in {step} steps", threshold, PASS)
        loss.backward()
        optimizer.step()
    return Check(name, f"loss {start:.3g} -> {value:.3g} in {step} steps", threshold, FAIL)


def validation_check(run: Run) -> Check:
    """Did validation accuracy rise, or hold at a level that shows learning, and end above chance?

    The check fails when the last evaluation is at or below chance (one class
    in C: nothing learned carries over), when it fell more than
    :data:`VAL_SLACK` below the best the run reached (validation falling while
    training goes on), or when it neither rose over the run nor stands at
    least halfway from chance to perfect (a run stuck low). A run at a high
    accuracy from its first evaluation (a small, easy data set learned within
    the first evaluations) holds and passes.
    """
    name = "validation improves"
    threshold = (
        f"last val acc > chance, within {VAL_SLACK:g} of the run's best, and above the first "
        "or at least halfway from chance to 1"
    )
    val = run.trace.val_acc[np.isfinite(run.trace.val_acc)]
    chance = run.config.chance_level
    if len(val) == 0:
        return Check(name, "no evaluation logged", threshold, UNMEASURED + ": log_eval() twice")
    if not math.isfinite(chance):
        return Check(
            name,
            f"no chance level for a run of kind '{run.config.kind or 'unknown'}'",
            threshold,
            UNMEASURED + ": pass Monitor(kind=...) and its targets",
        )
    last = float(val[-1])
    if len(val) == 1:
        if last <= chance + CHANCE_SLACK:
            return Check(name, f"{last:.3f} (chance {chance:.3f})", threshold, FAIL)
        return Check(
            name, f"one evaluation: {last:.3f}", threshold, UNMEASURED + ": log_eval() twice"
        )
    first, best = float(val[0]), float(val.max())
    learned = last > first or last >= (1.0 + chance) / 2
    holds = last >= best - VAL_SLACK
    verdict = PASS if last > chance + CHANCE_SLACK and holds and learned else FAIL
    measured = f"{first:.3f} -> {last:.3f} (best {best:.3f}, chance {chance:.3f})"
    return Check(name, measured, threshold, verdict)
