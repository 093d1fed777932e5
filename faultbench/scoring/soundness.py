"""Is a run sound? The checks whose failure means the run itself is broken, not the machine.

A diagnoser names a fault; these checks read the run directly, and the doctor's
headline (:mod:`faultbench.tools.doctor`) lets a failed one overrule a
"healthy" answer: a run whose validation score falls or ends at chance, or
whose model cannot memorize a small batch, is never called healthy. They live
here, below the diagnosers, so that the doctor's headline can itself be scored
as a diagnoser (``faultbench.diagnosers.doctor``).

Each line reads its statistics through the false-alarm budget
(:mod:`faultbench.scoring.budget`): it fails only where a statistic reaches the
principle's bound and lies beyond what the healthy runs of the tuned-on tasks
reach, and its measured value says how unusual that is.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from faultbench.scoring.budget import Statistic, judge
from faultbench.scoring.diagnosis import UNDECIDED, Diagnosis
from faultbench.scoring.memorize import EXAMPLES, MAX_STEPS, MEMORIZED, RATES, memorize
from faultbench.scoring.run import Run

PASS, FAIL, UNMEASURED = "pass", "fail", "not measured"
HEALTHY = "healthy"
NOT_HEALTHY = "not healthy"  # the headline when a check refutes a "healthy" answer
#: The checks whose failure means the run itself is unsound (not the machine).
SOUNDNESS = ("memorizes a small batch", "validation improves")
MEMORIZE_EXAMPLES = EXAMPLES  # a batch small enough that any working model can memorize it
MEMORIZE_STEPS = MAX_STEPS * len(RATES)  # probe steps the memorization may take at most
CHANCE_SLACK = 1e-6  # float32 rounding of an accuracy: 80/400 is stored as 0.2000000030
VAL_SLACK = 0.02  # how far below its best a run's last validation score may end: noise


@dataclass(frozen=True)
class Check:
    """One line of the upgrade checklist."""

    name: str  # what must hold before a bigger machine makes sense
    measured: str  # the value found, or why none could be
    threshold: str  # what passing means
    verdict: str  # "pass", "fail" or "not measured"


def _validation(run: Run) -> np.ndarray:
    return run.trace.val_acc[np.isfinite(run.trace.val_acc)]


def val_at_chance(run: Run) -> float:
    """Chance minus the last validation score (>= 0: at or below chance); NaN without one."""
    val = _validation(run)
    return run.config.chance_level - float(val[-1]) if len(val) else math.nan


def val_fell(run: Run) -> float:
    """How far the last validation score ended below the run's best (NaN with fewer than
    two evaluations)."""
    val = _validation(run)
    return float(val.max() - val[-1]) if len(val) >= 2 else math.nan


def val_stuck(run: Run) -> float:
    """For a run whose validation score did not rise: how far its last score is short of
    halfway from chance to perfect (-inf for one that rose; NaN with fewer than two)."""
    val = _validation(run)
    if len(val) < 2:
        return math.nan
    if val[-1] > val[0]:
        return -math.inf
    return (1.0 + run.config.chance_level) / 2 - float(val[-1])


def memorization_ratio(run: Run) -> float:
    """The lowest loss the memorization probe reached on its examples over its start (NaN
    without a probe); the probe is asked once per stored run (:func:`memorize`)."""
    return memorize(run.probe).ratio if run.probe is not None else math.nan


#: The statistics of the soundness lines, each calibrated per kind where its scale is the
#: task's score (chance, halfway) and on every kind together where it is a ratio of losses.
AT_CHANCE = Statistic(
    "val_at_chance", val_at_chance, -CHANCE_SLACK, True, "chance minus the last validation score"
)
FELL = Statistic("val_fell", val_fell, VAL_SLACK, True, "best minus last validation score")
STUCK = Statistic(
    "val_stuck", val_stuck, 0.0, True, "halfway to perfect minus the last score (not risen)"
)
MEMORIZATION = Statistic(
    "memorization",
    memorization_ratio,
    MEMORIZED,
    False,
    f"the probe's lowest loss over its start on {EXAMPLES} examples",
)
STATISTICS = (AT_CHANCE, FELL, STUCK, MEMORIZATION)


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
    """Can a fresh copy of the model memorize a tiny batch through the probe?

    The probe's lowest loss over its start (:func:`memorization_ratio`) fails the line
    where it stays above :data:`~faultbench.scoring.memorize.MEMORIZED` and above what
    the healthy runs of the tuned-on tasks reach. When the diagnoser ran the same probe
    and reports its reading as ``evidence["memorization"]`` (``rules`` does), that
    reading is the line: one probe, one answer, so the evidence and the checklist
    cannot disagree.
    """
    name = "memorizes a small batch"
    threshold = (
        f"loss on {EXAMPLES} examples down to {MEMORIZED:g} x its start at one of the rates "
        f"{', '.join(f'{r:g}' for r in RATES)}, and no higher than the healthy runs reach"
    )
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
    if run.probe is None:
        return Check(name, "no probe", threshold, UNMEASURED + ": no probe")
    memo = memorize(run.probe)
    reading = judge(MEMORIZATION, run, value=memo.ratio)
    measured = f"loss ratio {reading.describe()} in {memo.steps} probe steps"
    if math.isnan(reading.threshold):
        return Check(name, measured, threshold, f"{UNMEASURED}: {reading.note}")
    return Check(name, measured, threshold, FAIL if reading.fired else PASS)


def validation_check(run: Run) -> Check:
    """Did the validation score rise, or hold at a level that shows learning, and end
    above chance?

    The line fails when the last evaluation is at or below chance (nothing learned
    carries over), when it fell more than :data:`VAL_SLACK` below the best the run
    reached (validation falling while training goes on), or when it neither rose over
    the run nor stands at least halfway from chance to perfect (a run stuck low); each
    only where the healthy runs of the tuned-on tasks of the run's kind do not reach the
    same (:data:`STATISTICS`). A run at a high score from its first evaluation holds
    and passes.
    """
    name = "validation improves"
    threshold = (
        f"last val score > chance, within {VAL_SLACK:g} of the run's best, and above the "
        "first or at least halfway from chance to 1, as far as healthy runs go"
    )
    val = _validation(run)
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
    readings = [judge(stat, run) for stat in (AT_CHANCE, FELL, STUCK)]
    silent = [r for r in readings if math.isnan(r.threshold)]
    if silent:
        return Check(name, silent[0].note, threshold, f"{UNMEASURED}: not calibrated")
    last = float(val[-1])
    if len(val) == 1:
        if readings[0].fired:
            return Check(name, f"{last:.3f} (chance {chance:.3f})", threshold, FAIL)
        return Check(
            name, f"one evaluation: {last:.3f}", threshold, UNMEASURED + ": log_eval() twice"
        )
    measured = (
        f"{float(val[0]):.3f} -> {last:.3f} (best {float(val.max()):.3f}, chance {chance:.3f})"
    )
    fired = [r for r in readings if r.fired]
    if fired:
        measured += "; " + "; ".join(f"{r.check} {r.describe()}" for r in fired)
    return Check(name, measured, threshold, FAIL if fired else PASS)
