"""Scores a diagnoser on the real-bug suite, through the grid's own machinery.

The suite is a :class:`~faultbench.realbugs.storage.RealBugSuite` (each case's two
forms, stored runs) scored by the grid's own
:func:`~faultbench.scoring.evaluate.evaluate`: the same store, answer cache
(:mod:`faultbench.scoring.cache`), ``prepare``, worker process for a diagnoser that
does not ship with faultbench, and progress. The scores are
:mod:`faultbench.scoring.scores`' on the same table of scored runs as the grid's:
identification on the cases whose bug is one of the known faults, detection and
``other_fault`` on the others, false alarms on the fixed twins, each with its
Wilson interval. Beside each answer, the doctor's headline on the same run
(:func:`faultbench.tools.doctor.verdict_of`) is scored healthy / not healthy /
undecided against the truth.

The suite is a test set: a diagnoser whose ``tuned_on`` names it is refused. The
report, its scores and its summary are :mod:`faultbench.tools.realbugs_report`'s.
"""

from __future__ import annotations

import dataclasses
import hashlib
import inspect
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from faultbench.core.limits import DEFAULT_TIMEOUT
from faultbench.faults.fault import labels
from faultbench.realbugs import FORMS, Case, all_cases, get_case
from faultbench.realbugs.storage import (
    RealBugSuite,
    check_not_tuned_on_suite,
    ensure,
    handed_over,
    load_check,
    run_of,
    save_check,
    spec_of,
)
from faultbench.scoring.cache import DiagnosisCache, code_for
from faultbench.scoring.contract import contract_of
from faultbench.scoring.diagnosis import (
    UNKNOWN,
    Diagnoser,
    Diagnosis,
    get_diagnoser,
    instruments_of,
    ships_with_faultbench,
)
from faultbench.scoring.evaluate import RunResult, evaluate
from faultbench.scoring.harness import Outcome
from faultbench.scoring.run import Run
from faultbench.storage.records import RunRecord
from faultbench.storage.store import Store
from faultbench.tools import doctor
from faultbench.tools.realbugs_report import (
    FAILED,
    HEADLINES,
    NOT_HEALTHY,
    UNDECIDED,
    CaseResult,
    RealBugsReport,
    doctor_scores,
    render,
)
from faultbench.training.monitor import DEFAULT_EVERY

if TYPE_CHECKING:
    from faultbench.training.engine import Engine


def select(names: Sequence[str] | None) -> tuple[Case, ...]:
    """The cases called ``names`` (every case when None).

    Raises:
        FaultbenchError: an unknown case name.
    """
    return all_cases() if not names else tuple(get_case(name) for name in dict.fromkeys(names))


def evaluate_realbugs(
    diagnoser: str | Diagnoser,
    *,
    case_names: Sequence[str] | None = None,
    store: Store | str | None = None,
    timeout: float = DEFAULT_TIMEOUT,
    isolate: bool | None = None,
    progress: bool | None = None,
    engine: Engine | None = None,
) -> RealBugsReport:
    """Score ``diagnoser`` on the real-bug suite (or the cases named).

    Stored runs are reused and missing ones trained (seconds each) and stored; a
    shipped diagnoser asked for by its name has its answers stored beside them.

    Args:
        diagnoser: A registered name, ``module:Class``, or a diagnoser object.
        case_names: Only these cases (default: all).
        store: Where records live (a grid store's folder serves); the default store
            when omitted.
        timeout: Seconds one diagnosis may take (positive).
        isolate: Diagnose in a worker process; None decides as the grid does
            (:func:`faultbench.scoring.worker.wants_worker`).
        progress: Progress lines on stderr; False hides them.
        engine: Where a diagnoser's ``prepare`` trains the grid runs it learns from
            (``learned``), if the store lacks them.

    Returns:
        The report.

    Raises:
        FaultbenchError: an unknown diagnoser or case, a diagnoser tuned on the
            suite, a bad timeout, or a store that cannot be one.
    """
    the_store = store if isinstance(store, Store) else Store(store)
    report = evaluate(
        diagnoser,
        RealBugSuite(select(case_names)),
        store=the_store,
        engine=engine,
        timeout=timeout,
        isolate=isolate,
        progress=progress,
    )
    return RealBugsReport(
        report.diagnoser,
        report.tuned_on,
        tuple(_case_result(result, the_store) for result in report.results),
        trained=report.trained,
        notes=report.notes,
    )


def evaluate_suite(
    diagnosers: Sequence[str],
    *,
    case_names: Sequence[str] | None = None,
    store: Store | str | None = None,
    timeout: float = DEFAULT_TIMEOUT,
    isolate: bool | None = None,
    progress: bool | None = None,
    engine: Engine | None = None,
) -> list[RealBugsReport]:
    """:func:`evaluate_realbugs` for each of ``diagnosers`` on every case, one store shared.

    What ``faultbench report`` scores for the leaderboard's real-bug columns and
    ``validity.md``; a warm store trains and diagnoses nothing. With an ``engine``, its
    workers diagnose (and store) the shipped diagnosers' answers first, one diagnoser
    per worker at a time, and the reports read them back: the same answers, on every core.
    """
    the_store = store if isinstance(store, Store) else Store(store)
    if engine is not None and len(diagnosers) > 1:
        _diagnose_ahead(diagnosers, case_names, the_store, engine, timeout=timeout, isolate=isolate)
    return [
        evaluate_realbugs(
            name,
            case_names=case_names,
            store=the_store,
            timeout=timeout,
            isolate=isolate,
            progress=progress,
            engine=engine,
        )
        for name in diagnosers
    ]


@dataclasses.dataclass(frozen=True)
class _SuiteJob:
    """One diagnoser's pass over the suite, as a worker gets it (the store by its folder)."""

    diagnoser: str
    case_names: tuple[str, ...] | None
    root: Path
    timeout: float
    isolate: bool | None


def _diagnose_ahead(
    diagnosers: Sequence[str],
    case_names: Sequence[str] | None,
    store: Store,
    engine: Engine,
    *,
    timeout: float,
    isolate: bool | None,
) -> None:
    """Store every answer a worker can (shipped diagnosers asked for by name), the cases
    trained here first (so no two workers train one), the slow ones (``subset_seeds``) first.
    A failure is left for the report to meet again, in this process."""
    names = [
        name
        for name in dict.fromkeys(diagnosers)
        if ":" not in name and ships_with_faultbench(get_diagnoser(name))
    ]
    if len(names) < 2:
        return
    store.check()
    for _ in ensure(select(case_names), store):
        pass
    names = [name for name in names if not _answered(name, case_names, store)]
    names.sort(key=lambda name: contract_of(get_diagnoser(name)).subset_seeds is None)
    chosen = tuple(case_names) if case_names is not None else None
    jobs = [_SuiteJob(name, chosen, store.root, timeout, isolate) for name in names]
    for _ in engine.map_unordered(_diagnose_suite, jobs):
        pass


def _answered(name: str, case_names: Sequence[str] | None, store: Store) -> bool:
    """Whether every form of every case has ``name``'s stored answer: then no worker needs
    to start for it (each costs its imports, and a warm report waited 16 s for them)."""
    refs = instruments_of(get_diagnoser(name))
    specs = [
        spec_of(case, form).with_instruments(refs) for case in select(case_names) for form in FORMS
    ]
    cache = DiagnosisCache(store, name, code_for(get_diagnoser(name)), DEFAULT_EVERY)
    return cache.answers_all(specs)


def _diagnose_suite(job: _SuiteJob) -> int:
    report = evaluate_realbugs(
        job.diagnoser,
        case_names=job.case_names,
        store=str(job.root),
        timeout=job.timeout,
        isolate=job.isolate,
        progress=False,
    )
    return len(report.results)


def _case_result(result: RunResult, store: Store) -> CaseResult:
    """One answer of the suite's report, with the doctor's headline on the same run."""
    case, form = get_case(result.variant), result.level
    base = CaseResult(
        case.name, case.label, form, case.model, result.predicted, result.status, result.message
    )
    if result.status == "run-failed":
        return base
    record = store.load(spec_of(case, form), note=False, copy=False)
    headline = ""
    if result.status == "ok" and record is not None:
        outcome = Outcome("ok", result.predicted, evidence=dict(result.evidence))
        headline = _headline(outcome, record, store)
    return dataclasses.replace(
        base,
        probe_steps=result.probe_steps,
        seconds=result.diagnose_seconds,
        headline=headline,
        evidence=dict(result.evidence),
    )


def _doctor_code() -> str:
    """Hash of the doctor's source and of the module its checks live in (the same one, or
    another it imports them from): a stored memorization check is keyed by it."""
    digest = hashlib.sha256(inspect.getsource(doctor).encode())
    home = sys.modules[doctor.Check.__module__]
    if home is not doctor:
        digest.update(inspect.getsource(home).encode())
    return digest.hexdigest()[:12]


def _headline(outcome: Outcome, record: RunRecord, store: Store) -> str:
    """The doctor's headline on this run, given the diagnoser's answer and evidence."""
    run = handed_over(run_of(record, probe=False))  # the probe is rebuilt only if needed
    label = outcome.label if outcome.label in labels() else UNKNOWN
    diagnosis = Diagnosis(label, evidence=outcome.evidence)
    checks = (
        _memorization(run, outcome, record, store),
        doctor.validation_check(run),
        doctor.wait_check(run),
        doctor.accelerator_check(None),
        doctor.memory_check(None),
    )
    return doctor.verdict_of(diagnosis, checks, run)[0]


def _memorization(run: Run, outcome: Outcome, record: RunRecord, store: Store) -> doctor.Check:
    """The doctor's memorization check: the diagnoser's own if it reports one, else the
    doctor's probe (trained once per run and stored beside it).

    As :func:`faultbench.tools.doctor.doctor` makes it, but for a probe whose output is
    not class scores (a regression), which the doctor cannot run: that check is "not
    measured" here instead of an exception."""
    reported = outcome.evidence.get("memorization") if isinstance(outcome.evidence, dict) else None
    if isinstance(reported, dict) and isinstance(reported.get("memorized"), bool):
        return doctor.memorize_check(run, outcome.evidence)
    code = _doctor_code()
    stored = load_check(store, record, code)
    if stored is not None:
        return doctor.Check(**stored)
    try:
        check = doctor.memorize_check(handed_over(run_of(record)))  # with its probe, this once
    except Exception as exc:  # a probe whose output is not class scores (a regression)
        name, threshold = "memorizes a small batch", "100% of 16 in 300 steps"
        check = doctor.Check(
            name,
            f"cannot run: {type(exc).__name__}",
            threshold,
            doctor.UNMEASURED + ": no class scores",
        )
    save_check(store, record, code, check)
    return check


__all__ = [
    "FAILED",
    "FORMS",
    "HEADLINES",
    "NOT_HEALTHY",
    "UNDECIDED",
    "CaseResult",
    "RealBugsReport",
    "check_not_tuned_on_suite",
    "doctor_scores",
    "evaluate_realbugs",
    "evaluate_suite",
    "handed_over",
    "render",
    "select",
]
