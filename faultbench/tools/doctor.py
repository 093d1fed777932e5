"""Diagnose a monitored run and say whether a bigger machine would help.

A bigger machine pays only when the job is already sound and already uses the
machine it has. The upgrade checklist therefore asks five things, each with a
measured value, a threshold and a verdict; a question that this machine (or the
trace) cannot answer says so instead of guessing.

The report never contradicts itself. The headline, the diagnoser's evidence and
the checklist read the same values: a run whose validation accuracy falls or
ends at or below chance, or whose model cannot memorize a small batch, is never
called healthy, whatever the diagnoser answered; a memorization the diagnoser
itself ran (``evidence["memorization"]["memorized"]``) is the checklist's line
rather than a second, possibly different, probe; a run that recorded no
accuracy at all is "undecided", with the checks that could not run named; and
the upgrade verdict is one line that follows from the headline and the checks.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import torch

from faultbench.core.errors import FaultbenchError
from faultbench.scoring.diagnosis import Diagnoser, Diagnosis, get_diagnoser
from faultbench.scoring.run import Probe, Run
from faultbench.scoring.soundness import (
    CHANCE_SLACK,
    FAIL,
    HEALTHY,
    MEMORIZE_EXAMPLES,
    MEMORIZE_STEPS,
    NOT_HEALTHY,
    PASS,
    SOUNDNESS,
    UNDECIDED,
    UNMEASURED,
    VAL_SLACK,
    Check,
    memorize_check,
    validation_check,
    verdict_of,
)
from faultbench.training.monitor import KindReading, Monitor

__all__ = [
    "CHANCE_SLACK",
    "FAIL",
    "MEMORIZE_EXAMPLES",
    "MEMORIZE_STEPS",
    "NOT_HEALTHY",
    "NO_PROBE_NOTE",
    "PASS",
    "UNDECIDED",
    "UNMEASURED",
    "VAL_SLACK",
    "Check",
    "DoctorReport",
    "diagnose_monitor",
    "doctor",
    "memorize_check",
    "validation_check",
    "verdict_of",
]

MAX_WAIT_SHARE = 0.5  # above this the loader, not the accelerator, sets the pace
MIN_UTILIZATION = 80  # percent of time the GPU must be busy to call it busy
NO_PROBE_NOTE = "no probe given: only the passive checks (the trace) ran"


@dataclass(frozen=True)
class DoctorReport:
    """The diagnosis of a run and its upgrade checklist; ``str()`` is the printed report."""

    diagnosis: Diagnosis  # the diagnoser's answer, with its evidence
    diagnoser: str  # the diagnoser's name
    checks: tuple[Check, ...]  # the upgrade checklist, in order
    passive_only: bool  # True when no probe was available
    verdict: str = ""  # the headline: the diagnosis's label, NOT_HEALTHY or UNDECIDED
    reason: str = ""  # why the headline differs from the diagnosis's label, if it does
    kind: str = ""  # a monitored run's kind and what said it, or the argument that states it

    @property
    def headline(self) -> str:
        """The report's verdict on the run (the first line says it)."""
        return self.verdict or self.diagnosis.label

    @property
    def upgrade(self) -> str:
        """``"yes"`` only for a healthy run whose every check passes; ``"no"`` when the run
        is not healthy or a check fails; else ``"undecided"``."""
        return self._upgrade()[0]

    def _upgrade(self) -> tuple[str, str]:
        if self.headline == UNDECIDED:
            return UNDECIDED, "the run's health is undecided until it records its score"
        if self.headline == NOT_HEALTHY:
            return "no", "the run is not healthy: fix it first, a bigger machine does not"
        if self.headline != HEALTHY:
            return "no", f"fix '{self.headline}' first: a bigger machine does not fix a bug"
        failed = [c.name for c in self.checks if c.verdict == FAIL]
        if failed:
            return "no", "failed: " + ", ".join(failed)
        unmeasured = [c.name for c in self.checks if c.verdict != PASS]
        if unmeasured:
            return UNDECIDED, "not measured: " + ", ".join(unmeasured)
        return "yes", "every check passes"

    def table(self) -> pd.DataFrame:
        """The checklist as a table."""
        return pd.DataFrame([dataclasses.asdict(c) for c in self.checks])

    def __str__(self) -> str:
        d = self.diagnosis
        conf = "" if d.confidence is None else f" (confidence {d.confidence:.2f})"
        if self.headline == d.label:
            lines = [f"diagnosis: {d.label}{conf}  [diagnoser: {self.diagnoser}]"]
        else:
            lines = [
                f"diagnosis: {self.headline}: {self.reason}",
                f"  (the diagnoser {self.diagnoser} answered {d.label}{conf})",
            ]
        if self.kind:
            lines.append(f"kind: {self.kind}")
        if self.passive_only:
            lines.append(f"note: {NO_PROBE_NOTE}")
        lines += [f"  {k}: {_short(v)}" for k, v in d.evidence.items()]
        lines += ["", "upgrade checklist (a bigger machine makes sense only if every line passes):"]
        lines.append(_left_aligned(self.table()))
        answer, why = self._upgrade()
        lines.append(f"bigger machine: {answer} ({why})")
        return "\n".join(lines)


def run_of(
    monitor: Monitor, *, probe: Probe | None = None, task: str = "user", seed: int = 0
) -> Run:
    """The :class:`Run` a diagnoser is handed for a monitored loop."""
    return Run(task, seed, monitor.trace(), monitor.config(), probe)


def diagnose_monitor(
    monitor: Monitor, diagnoser: str | Diagnoser = "rules", *, probe: Probe | None = None
) -> Diagnosis:
    """Diagnose the loop ``monitor`` watched .

    Args:
        monitor: The monitor of a finished (or paused) loop.
        diagnoser: A registered name, ``module:Class`` or a diagnoser object.
        probe: Lets active checks retrain the model; see :meth:`Probe.from_user`.

    Returns:
        The diagnosis; without a probe its evidence says only passive checks ran.

    Raises:
        FaultbenchError: an unknown diagnoser, or a monitor that saw no step.
    """
    return _diagnose(run_of(monitor, probe=probe), get_diagnoser(diagnoser))


def _diagnose(run: Run, diag: Diagnoser) -> Diagnosis:
    if run.trace.steps == 0:
        raise FaultbenchError(
            "the monitor recorded 0 steps; expected monitor.step(loss) after each optimizer.step()"
        )
    answer = diag.diagnose(run)
    if run.probe is None and "probe" not in answer.evidence:
        answer = dataclasses.replace(answer, evidence={**answer.evidence, "probe": NO_PROBE_NOTE})
    return answer


def doctor(
    monitor_or_run: Monitor | Run,
    diagnoser: str | Diagnoser = "rules",
    *,
    probe: Probe | None = None,
    oom_after_cheap_fixes: bool | None = None,
) -> DoctorReport:
    """Diagnose a run and check whether a bigger machine would pay.

    Args:
        monitor_or_run: A :class:`Monitor` of the user's loop, or a benchmark :class:`Run`.
        diagnoser: A registered name, ``module:Class`` or a diagnoser object.
        probe: For a Monitor: lets the diagnoser and the memorization check
            retrain the model. A Run carries its own probe.
        oom_after_cheap_fixes: Your answer to "did memory still run out after a
            smaller microbatch, shorter sequences, activation checkpointing and
            adapters?"; the trace cannot tell, so None leaves it unmeasured.

    Returns:
        The report; ``print(report)`` shows the diagnosis and the checklist.
    """
    monitor = monitor_or_run if isinstance(monitor_or_run, Monitor) else None
    if monitor is not None:
        run = run_of(monitor, probe=probe)
        device = _device_of(monitor.model)
    elif isinstance(monitor_or_run, Run):
        run = monitor_or_run if probe is None else dataclasses.replace(monitor_or_run, probe=probe)
        device = None
    else:
        raise FaultbenchError(
            f"doctor() needs a Monitor or a Run; got {type(monitor_or_run).__name__}"
        )
    diag = get_diagnoser(diagnoser)
    diagnosis = _diagnose(run, diag)
    checks = (
        memorize_check(run, diagnosis.evidence),
        validation_check(run),
        wait_check(run),
        accelerator_check(device),
        memory_check(oom_after_cheap_fixes),
    )
    verdict, reason = verdict_of(diagnosis, checks, run)
    kind = monitor.kind_reading if monitor is not None else None
    if monitor is not None and kind is not None and not _has_score(run):
        reason = _no_score(monitor, kind, checks) or reason
    described = kind.describe() if kind is not None else ""
    return DoctorReport(diagnosis, diag.name, checks, run.probe is None, verdict, reason, described)


def _has_score(run: Run) -> bool:
    trace = run.trace
    return bool(
        np.isfinite(np.concatenate([trace.train_acc, trace.val_acc, trace.batch_acc])).any()
    )


def _no_score(monitor: Monitor, kind: KindReading, checks: tuple[Check, ...]) -> str:
    """Why a monitored run that logged something has no score, and what to add; "" when
    nothing was logged at all (the soundness checks' own reason says so)."""
    logged = list(monitor.trace().metrics)  # in the order they were logged
    if not logged and not monitor.notes:
        return ""
    said = []
    if monitor.notes:
        said.append("monitor.step's output and target could not be read (" + monitor.notes[0] + ")")
    if logged:
        said.append("log_eval logged " + ", ".join(logged))
    if kind.kind is None:
        fix = f"the run's kind cannot be told from them: add {kind.argument} (see 'kind:' below)"
    else:
        score = kind.kind.score
        fix = (
            f"none is the score of a {kind.kind.name} run: log val_{score} (and train_{score}) "
            f"with monitor.log_eval, or give monitor.step(loss, out, yb) the batch's targets"
        )
    skipped = [c.name for c in checks if c.name in SOUNDNESS and c.verdict.startswith(UNMEASURED)]
    failed = [
        f"{c.name}: {c.measured}" for c in checks if c.name in SOUNDNESS and c.verdict == FAIL
    ]
    why = (
        "no score was recorded though "
        + " and ".join(said)
        + f"; {fix}, so these checks could not run: "
        + ", ".join(skipped)
    )
    return "; ".join(failed) + f"; and {why}" if failed else why


def wait_check(run: Run) -> Check:
    """Is the share of step time spent waiting for data low?"""
    name, threshold = "data wait is low", f"wait share < {MAX_WAIT_SHARE:g}"
    if float(run.trace.wait_seconds.sum() + run.trace.compute_seconds.sum()) == 0.0:
        return Check(name, "no timings", threshold, UNMEASURED + ": no step timings")
    share = run.trace.wait_share
    return Check(name, f"{share:.2f}", threshold, PASS if share < MAX_WAIT_SHARE else FAIL)


def accelerator_check(device: torch.device | None) -> Check:
    """Is the accelerator busy? Only answerable where there is one and a counter for it."""
    name, threshold = "accelerator is busy", f"GPU utilization >= {MIN_UTILIZATION}%"
    if not torch.cuda.is_available():
        mps = getattr(torch.backends, "mps", None)
        why = "no utilization counter for MPS" if mps and mps.is_available() else "no accelerator"
        return Check(name, why, threshold, f"{UNMEASURED}: {why}")
    if device is not None and device.type != "cuda":
        return Check(name, f"model on {device.type}, GPU idle", threshold, FAIL)
    try:
        percent = int(torch.cuda.utilization())  # sampled now, over the driver's last window
    except Exception as exc:  # needs pynvml / amdsmi; absent on many installs
        return Check(name, "no counter", threshold, f"{UNMEASURED}: {type(exc).__name__}")
    return Check(
        name, f"{percent}% (sampled now)", threshold, PASS if percent >= MIN_UTILIZATION else FAIL
    )


def memory_check(oom_after_cheap_fixes: bool | None) -> Check:
    """Did memory run out even after the cheaper fixes? Only the user can say."""
    name = "memory ran out after cheaper fixes"
    threshold = "yes, despite the cheaper fixes"
    if oom_after_cheap_fixes is None:
        return Check(
            name, "not in the trace", threshold, f"{UNMEASURED} from the trace: answer it yourself"
        )
    measured = "yes (you said)" if oom_after_cheap_fixes else "no (you said)"
    return Check(name, measured, threshold, PASS if oom_after_cheap_fixes else FAIL)


def _left_aligned(table: pd.DataFrame) -> str:
    # Text columns read better left-aligned; pandas right-aligns by default.
    widths = {c: max(len(c), *(len(str(v)) for v in table[c])) for c in table}
    formatters = {c: (lambda v, w=w: str(v).ljust(w)) for c, w in widths.items()}
    return table.to_string(index=False, justify="left", formatters=formatters)


def _device_of(model: torch.nn.Module) -> torch.device | None:
    param = next(model.parameters(), None)
    return param.device if param is not None else None


def _short(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{k}: {_short(v)}" for k, v in value.items()) + "}"
    if isinstance(value, np.ndarray):
        return np.array2string(value, precision=4, threshold=8)
    return str(value)
