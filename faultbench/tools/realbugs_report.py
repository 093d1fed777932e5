"""A diagnoser's answers on the real-bug suite: the results, their scores, their summary.

:func:`faultbench.tools.realbugs.evaluate_realbugs` makes a :class:`RealBugsReport`;
its shares are :mod:`faultbench.scoring.scores`' on a table in the grid's columns
(:meth:`RealBugsReport.scored_frame`), and the doctor's headline on each run is scored
beside the answer: not healthy on a faulty form, healthy on a fixed twin.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import pandas as pd

from faultbench.faults.fault import HEALTHY, OTHER_FAULT
from faultbench.realbugs import SUITE, get_case
from faultbench.scoring import scores
from faultbench.tools import doctor

NOT_HEALTHY = "not healthy"
UNDECIDED = doctor.UNDECIDED
FAILED = "failed"  # the diagnosis failed, so the doctor has no headline
HEADLINES = (HEALTHY, NOT_HEALTHY, UNDECIDED, FAILED)


@dataclass(frozen=True)
class CaseResult:
    """One form of one case: the truth, the answer, and the doctor's headline."""

    case: str  # the case's name
    label: str  # the label the case's bug deserves
    form: str  # "faulty" or "fixed"
    model: str  # the case's kind of model
    predicted: str  # the diagnoser's label ("unknown" unless status is "ok")
    status: str  # ok, error, timeout, crashed, or run-failed
    message: str = ""  # why the answer failed, if it did
    probe_steps: int = 0  # probe training steps the diagnosis used
    seconds: float = 0.0  # wall time of the diagnosis (a measurement)
    headline: str = ""  # the doctor's headline: a label, "not healthy" or "undecided"
    evidence: dict[str, Any] = field(default_factory=dict)  # the diagnoser's numbers

    @property
    def truth(self) -> str:
        """The right answer: the case's label on the faulty form, healthy on the fixed twin."""
        return self.label if self.form == "faulty" else HEALTHY

    @property
    def kind(self) -> str:
        """healthy (fixed twin), known (one of the nine) or heldout (other_fault)."""
        if self.form == "fixed":
            return scores.HEALTHY
        return scores.HELDOUT if self.label == OTHER_FAULT else scores.KNOWN

    @property
    def correct(self) -> bool:
        """Whether the answer names the truth."""
        return self.status == "ok" and self.predicted == self.truth

    @property
    def headline_class(self) -> str:
        """The headline as the doctor's verdict on health: one of :data:`HEADLINES`."""
        if self.status != "ok":
            return FAILED
        if self.headline in (HEALTHY, UNDECIDED):
            return self.headline
        return NOT_HEALTHY

    @property
    def headline_correct(self) -> bool:
        """Whether the headline's verdict on health is the truth's."""
        return self.headline_class == (HEALTHY if self.form == "fixed" else NOT_HEALTHY)


@dataclass(frozen=True)
class RealBugsReport:
    """One diagnoser's answers on the suite."""

    diagnoser: str  # the diagnoser's name
    tuned_on: tuple[str, ...]  # what it declared
    results: tuple[CaseResult, ...]  # one per case and form, by case then form
    trained: int = 0  # runs trained by this evaluation (the rest were stored)
    notes: tuple[str, ...] = ()  # what the user should know

    def scored_frame(self) -> pd.DataFrame:
        """One row per answer in the columns of :data:`faultbench.scoring.scores.COLUMNS`."""
        rows = [
            {
                "diagnoser": self.diagnoser,
                "task": SUITE,
                "tuned": False,
                "seed": get_case(r.case).seed,
                "truth": r.truth,
                "kind": r.kind,
                "variant": r.case,
                "level": "",
                "grid": SUITE,
                "predicted": r.predicted,
                "status": r.status,
                "probe_steps": r.probe_steps,
                "diagnose_seconds": r.seconds,
            }
            for r in self.results
        ]
        return pd.DataFrame(rows, columns=list(scores.COLUMNS))

    def answers_frame(self) -> pd.DataFrame:
        """:meth:`scored_frame` with, per answer, the case's label, kind of model and form,
        whether it was right, and the doctor's headline (what the reports read)."""
        frame = self.scored_frame()
        frame["case"] = [r.case for r in self.results]
        frame["label"] = [r.label for r in self.results]
        frame["model"] = [r.model for r in self.results]
        frame["form"] = [r.form for r in self.results]
        frame["correct"] = [r.correct for r in self.results]
        frame["headline"] = [r.headline for r in self.results]
        frame["headline_verdict"] = [r.headline_class for r in self.results]
        frame["headline_correct"] = [r.headline_correct for r in self.results]
        return frame

    @property
    def scores(self) -> dict[str, Any]:
        """Identification, detection, false alarms (Wilson intervals), and the doctor's headline."""
        frame = self.scored_frame()
        found = {
            "identification": scores.identification(frame),
            "detection": scores.detection(frame),
            "false_alarms": scores.false_alarms(frame),
            "cost": {"probe_steps": scores.cost(frame)["probe_steps"]},
            "doctor": doctor_scores(self.results),
        }
        return scores.to_jsonable(found)  # type: ignore[no-any-return]

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready summary (the CLI's ``--json``)."""
        return {
            "diagnoser": self.diagnoser,
            "task": SUITE,
            "tuned_on": list(self.tuned_on),
            "cases": len({r.case for r in self.results}),
            "scores": self.scores,
            "runs": [{**asdict(r), "truth": r.truth, "correct": r.correct} for r in self.results],
            "trained": self.trained,
            "notes": list(self.notes),
        }

    def __str__(self) -> str:
        """A table of the cases' answers, then the scores."""
        return render(self)


def doctor_scores(results: Sequence[CaseResult]) -> dict[str, scores.Share]:
    """The doctor's headline against the truth, each share with its Wilson interval."""
    faulty = [r for r in results if r.form == "faulty"]
    fixed = [r for r in results if r.form == "fixed"]
    return {
        "faulty_not_healthy": scores.wilson(
            sum(r.headline_class == NOT_HEALTHY for r in faulty), len(faulty)
        ),
        "faulty_undecided": scores.wilson(
            sum(r.headline_class == UNDECIDED for r in faulty), len(faulty)
        ),
        "fixed_healthy": scores.wilson(sum(r.headline_class == HEALTHY for r in fixed), len(fixed)),
        "fixed_not_healthy": scores.wilson(
            sum(r.headline_class == NOT_HEALTHY for r in fixed), len(fixed)
        ),
        "fixed_undecided": scores.wilson(
            sum(r.headline_class == UNDECIDED for r in fixed), len(fixed)
        ),
        "right": scores.wilson(sum(r.headline_correct for r in results), len(results)),
    }


def _mark(r: CaseResult | None) -> str:
    return "" if r is None else ("✓ " if r.correct else "✗ ")


def _answer(r: CaseResult | None) -> str:
    return "-" if r is None else (r.predicted if r.status == "ok" else r.status)


def _doctor_mark(r: CaseResult | None) -> str:
    return "-" if r is None else ("✓" if r.headline_correct else "✗")


def _share(d: dict[str, Any]) -> str:
    if not d["n"]:
        return "n/a"
    return f"{d['value']:.3f} [{d['low']:.2f}, {d['high']:.2f}] ({d['hits']}/{d['n']})"


def render(report: RealBugsReport) -> str:
    """The summary ``faultbench run --task realbugs`` prints: one line per case, then the scores.

    A case's line shows its label, the answer on each form (✓ right, ✗ wrong) and
    whether the doctor's headline was right on each (faulty/fixed).
    """
    by_case: dict[str, dict[str, CaseResult]] = {}
    for r in report.results:
        by_case.setdefault(r.case, {})[r.form] = r
    width = max([len(c) for c in by_case] + [4])
    lines = [
        f"{report.diagnoser} on the real-bug suite ({len(by_case)} cases, each faulty and fixed)",
        "",
        f"{'case':<{width}}  {'label':<19}  {'faulty →':<21}  {'fixed →':<21}  doctor",
    ]
    for name, forms in by_case.items():
        faulty, fixed = forms.get("faulty"), forms.get("fixed")
        either = faulty or fixed
        label = either.label if either is not None else ""
        lines.append(
            f"{name:<{width}}  {label:<19}  {_mark(faulty) + _answer(faulty):<21}  "
            f"{_mark(fixed) + _answer(fixed):<21}  {_doctor_mark(faulty)}/{_doctor_mark(fixed)}"
        )
    s = report.scores
    lines += [
        "",
        f"identification (known-label cases):   {_share(s['identification']['accuracy'])}",
        f"out-of-list cases not called healthy:  {_share(s['detection']['not_healthy'])}",
        f"out-of-list cases called other_fault:  {_share(s['detection']['other_fault'])}",
        f"false alarms (fixed twins):            {_share(s['false_alarms'])}",
        f"doctor's headline right:               {_share(s['doctor']['right'])}",
    ]
    failures: dict[str, int] = {}
    for r in report.results:
        if r.status != "ok":
            key = f"{r.status}: {(r.message.strip().splitlines() or ['(no message)'])[0][:80]}"
            failures[key] = failures.get(key, 0) + 1
    lines += [f"  {n} × {key}" for key, n in sorted(failures.items(), key=lambda kv: -kv[1])]
    return "\n".join(lines)


__all__ = [
    "FAILED",
    "HEADLINES",
    "NOT_HEALTHY",
    "UNDECIDED",
    "CaseResult",
    "RealBugsReport",
    "doctor_scores",
    "render",
]
