"""Early warnings: the doctor's passive checks on a run that is still training.

``Monitor.check()`` (and the Lightning and Hugging Face callbacks, every N steps) hands
the run so far to the rules that can judge an unfinished run
(:func:`faultbench.diagnosers.rules.early_rules`: the passive ones and the trace's
candidates, none of which asks whether the run ended well), each calibrated against
the healthy runs of the tuned-on tasks (:mod:`faultbench.scoring.budget`). A rule that
fires is a warning naming the fault, its evidence (how unusual the value is against
those healthy runs) and the fix to try; with a probe, only once trying that fix for a
few probe steps measurably helped (:mod:`faultbench.diagnosers._treatment`).

A warning never stops the run unless asked: ``check(stop=True)`` raises
:class:`StopTraining`, which a loop can catch to end there. Each warning is printed the
first time it is raised for a monitor, not at every check.
"""

from __future__ import annotations

import sys
import weakref
from dataclasses import dataclass
from typing import Any

from faultbench.diagnosers import rules
from faultbench.diagnosers._treatment import FIXES
from faultbench.scoring.run import Probe, Run
from faultbench.tools.doctor import run_of
from faultbench.training.monitor import Monitor


@dataclass(frozen=True)
class EarlyWarning:
    """One fault the run so far shows."""

    fault: str  # the fault's label
    step: int  # the steps the run had made when it was raised
    rule: str  # the rule that fired
    evidence: str  # its statistic against the healthy runs of the tuned-on tasks
    fix: str  # what to try
    treatment: str = ""  # what trying the fix on the probe measured ("" without a probe)

    def __str__(self) -> str:
        tried = f"; {self.treatment}" if self.treatment else ""
        return (
            f"faultbench early warning at step {self.step}: {self.fault} ({self.rule}: "
            f"{self.evidence}{tried}); fix: {self.fix}"
        )


class StopTraining(Exception):
    """Raised by ``Monitor.check(stop=True)`` when a warning holds: end the loop here."""

    def __init__(self, warnings: list[EarlyWarning]) -> None:
        super().__init__("; ".join(str(w) for w in warnings))
        self.warnings = warnings  # what was found


CHECK_EVERY = 100  # optimizer updates between the callbacks' checks (faultbench bench prices it)

#: The faults already said for each monitor (printed once each).
_SAID: weakref.WeakKeyDictionary[Monitor, set[str]] = weakref.WeakKeyDictionary()


def check(
    monitor: Monitor, *, probe: Probe | None = None, show: bool = True, stop: bool = False
) -> list[EarlyWarning]:
    """The warnings that hold on the run ``monitor`` has recorded so far (see the module).

    Raises:
        StopTraining: ``stop`` is True and a warning holds.
    """
    if not monitor.config().steps:
        return []
    found = warnings_of(run_of(monitor, probe=probe))
    said = _SAID.setdefault(monitor, set())
    for warning in found:
        if show and warning.fault not in said:
            print(warning, file=sys.stderr)
        said.add(warning.fault)
    if stop and found:
        raise StopTraining(found)
    return found


def warnings_of(run: Run) -> list[EarlyWarning]:
    """The early warning on ``run``, if any: the first rule that fires and stands, in the
    order the doctor trusts them (so the warning names what its diagnosis would)."""
    evidence: dict[str, Any] = {}
    for label, rule, finding in rules.raised(run, rules.early_rules(run), evidence):
        said = [f"{r.check} {r.describe()}" for r in finding.readings if r.fired]
        return [
            EarlyWarning(
                label,
                run.trace.steps,
                rule,
                "; ".join(said),
                FIXES.get(label, "see the doctor's report"),
                str(evidence[rule].get("treatment", {}).get("said", "")),
            )
        ]
    return []
