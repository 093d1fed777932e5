"""``doctor``: the doctor's headline over ``rules``, scored as a diagnoser.

A practitioner reads the doctor's first line, not the diagnoser's label: the
headline is ``rules``' answer unless a soundness check overrules a "healthy"
one (validation that falls or ends at chance, a model that cannot memorize a
small batch: ``not healthy``), or the run recorded no accuracy (``undecided``).
Scored like any diagnoser, ``not healthy`` is the answer ``other_fault``
(something is broken, none of the labels says what) and ``undecided`` is scored
apart from right and wrong, so its false alarms are the headline's false alarms.

Every check it reads, rules' and the soundness lines', is calibrated against the
healthy drawn runs of its tuned-on tasks (:data:`STATISTICS`,
:mod:`faultbench.scoring.budget`): their false alarms share one budget.
"""

from __future__ import annotations

from typing import Any

from faultbench.diagnosers import rules
from faultbench.diagnosers.rules import RulesDiagnoser
from faultbench.scoring import soundness
from faultbench.scoring.budget import Statistic
from faultbench.scoring.diagnosis import DIAGNOSERS, Diagnosis
from faultbench.scoring.run import Run
from faultbench.scoring.soundness import (
    HEALTHY,
    NOT_HEALTHY,
    memorize_check,
    validation_check,
    verdict_of,
)

OTHER_FAULT = "other_fault"  # faultbench.faults' answer for "broken, but none of the labels"
AS_LABEL = {NOT_HEALTHY: OTHER_FAULT}  # a headline scored as an answer
#: Every statistic the headline reads (rules' and the soundness lines'), once each: the
#: checks the false-alarm budget is split across.
STATISTICS: tuple[Statistic, ...] = tuple(
    {s.name: s for s in (*rules.STATISTICS, *soundness.STATISTICS)}.values()
)


@DIAGNOSERS.register("doctor")
class DoctorDiagnoser:
    """The doctor's headline (healthy / a fault / not healthy / undecided) over ``rules``."""

    name = "doctor"
    probes = True  # rules' memorization probe, whose result is also the checklist's line
    tuned_on: frozenset[str] | set[str] = RulesDiagnoser.tuned_on

    def __init__(self) -> None:
        self.rules = RulesDiagnoser()

    def diagnose(self, run: Run) -> Diagnosis:
        """``rules``' answer, unless the soundness checks overrule a "healthy" one."""
        answer = self.rules.diagnose(run)
        if answer.label != HEALTHY:
            return answer  # a named fault (or undecided) is the headline whatever the checks say
        checks = (memorize_check(run, answer.evidence), validation_check(run))
        headline, reason = verdict_of(answer, checks, run)
        evidence: dict[str, Any] = {
            **answer.evidence,
            "headline": headline,
            "overruled_because": reason,
            "checks": {c.name: {"measured": c.measured, "verdict": c.verdict} for c in checks},
        }
        return Diagnosis(AS_LABEL.get(headline, headline), evidence=evidence)
