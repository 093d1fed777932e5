"""Scores a diagnoser on the real-bug suite, through the grid's own machinery.

Each case's two forms are stored runs (:mod:`faultbench.realbugs.storage`);
each is handed to the diagnoser as a :class:`~faultbench.scoring.run.Run` with
its trace, configuration and probe, by :func:`~faultbench.scoring.harness.diagnose_safely`
in this process or by a :class:`~faultbench.scoring.worker.DiagnosisWorker` for a
diagnoser that does not ship with faultbench, and a shipped diagnoser's answers
are stored beside the runs (:mod:`faultbench.scoring.cache`). The scores are
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

import contextlib
import dataclasses
import hashlib
import inspect
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from faultbench.core.errors import FaultbenchError
from faultbench.core.limits import DEFAULT_TIMEOUT
from faultbench.faults.fault import labels
from faultbench.realbugs import FORMS, SUITE, Case, all_cases, get_case
from faultbench.realbugs.storage import CaseRuns, CaseStore, ensure, load_check, run_of, save_check
from faultbench.scoring.cache import DiagnosisCache, diagnosis_code
from faultbench.scoring.diagnosis import (
    UNKNOWN,
    Diagnoser,
    Diagnosis,
    get_diagnoser,
    ships_with_faultbench,
)
from faultbench.scoring.harness import Outcome, check_timeout, diagnose_safely
from faultbench.scoring.run import Run
from faultbench.scoring.worker import DiagnosisWorker, wants_worker
from faultbench.storage.records import RunRecord
from faultbench.storage.runner import progress_bar
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


# ---------------------------------------------------------------------------------------
# SAMPLING: the ONE place where a stored case run becomes the run a diagnoser reads.
# The cases record every step (Monitor(every=1)), as the grid's loop does, and each
# diagnoser is handed the trace as the default Monitor (every=20) would have recorded
# it, as on the grid's headline: in-process and worker diagnoses, and the doctor's
# headline, all go through this function.
# ---------------------------------------------------------------------------------------
def handed_over(run: Run) -> Run:
    """The run a diagnoser (and the doctor) reads: the stored every-step run read as the
    default ``Monitor(every=20)`` records it, the trace a practitioner has (as on the grid)."""
    return dataclasses.replace(run, trace=run.trace.sampled(DEFAULT_EVERY))


def check_not_tuned_on_suite(diagnoser: Diagnoser) -> None:
    """Refuse a diagnoser that declares it was tuned on the suite.

    Raises:
        FaultbenchError: ``tuned_on`` names the suite.
    """
    if SUITE in set(diagnoser.tuned_on):
        raise FaultbenchError(
            f"diagnoser '{diagnoser.name}' declares tuned_on {sorted(diagnoser.tuned_on)}, "
            f"which names '{SUITE}': the real-bug suite is a test set, and no diagnoser may be "
            "tuned on it; expected tuned_on without it"
        )


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
    timeout = check_timeout(timeout)
    diag = get_diagnoser(diagnoser)
    check_not_tuned_on_suite(diag)
    chosen = select(case_names)
    the_store = as_case_store(store)
    the_store.check()
    with progress_bar(2 * len(chosen), "training realbugs", unit="run", show=progress) as bar:
        stored = []
        for item in ensure(chosen, the_store):
            stored.append(item)
            bar.update()
    trained = sum(item.trained for item in stored)
    cache = _stored_answers(diagnoser, diag, the_store)
    answered = cache is not None and all(
        cache.load(i.record) is not None for i in stored if i.record.ok
    )
    in_worker, note = wants_worker(diag, isolate)
    prepare = getattr(diag, "prepare", None)
    if callable(prepare) and not answered:
        prepare(store=the_store, engine=engine)
    results = []
    with _diagnose_with(diag, timeout, in_worker and not answered) as diagnose:
        desc = f"diagnosing {SUITE} ({diag.name})"
        with progress_bar(len(stored), desc, unit="run", show=progress) as bar:
            for item in stored:
                results.append(
                    _result(item.case, item.form, item.record, diagnose, cache, the_store)
                )
                bar.update()
    return RealBugsReport(
        diag.name,
        tuple(sorted(diag.tuned_on)),
        tuple(results),
        trained=trained,
        notes=tuple([*the_store.notes, *([note] if note else [])]),
    )


def as_case_store(store: Store | str | None) -> CaseStore:
    """``store`` as a :class:`CaseStore` on the same folder (the same object if it is one)."""
    if isinstance(store, CaseStore):
        return store
    return CaseStore(store.root if isinstance(store, Store) else store)


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
    the_store = as_case_store(store)
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
    store: CaseStore,
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
    names.sort(key=lambda name: getattr(get_diagnoser(name), "subset_seeds", None) is None)
    chosen = tuple(case_names) if case_names is not None else None
    jobs = [_SuiteJob(name, chosen, store.root, timeout, isolate) for name in names]
    for _ in engine.map_unordered(_diagnose_suite, jobs):
        pass


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


def _stored_answers(
    asked: str | Diagnoser, diag: Diagnoser, store: CaseStore
) -> DiagnosisCache | None:
    if not (isinstance(asked, str) and ":" not in asked and ships_with_faultbench(diag)):
        return None
    return DiagnosisCache(store, diag.name, diagnosis_code(), DEFAULT_EVERY)


class _Diagnose:
    """Turns a record into an outcome: in a worker process, or here."""

    def __init__(self, diag: Diagnoser, timeout: float, worker: DiagnosisWorker | None) -> None:
        self.diag, self.timeout, self.worker = diag, timeout, worker

    def __call__(self, record: RunRecord) -> Outcome:
        if self.worker is not None:
            return self.worker.diagnose(record)
        try:
            run = handed_over(run_of(record))
        except Exception as exc:  # a broken rebuild must not stop the other cases
            return Outcome("error", UNKNOWN, message=f"building the run failed: {exc!r}")
        return diagnose_safely(self.diag, run, timeout=self.timeout)


@contextlib.contextmanager
def _diagnose_with(diag: Diagnoser, timeout: float, in_worker: bool) -> Iterator[_Diagnose]:
    if not in_worker:
        yield _Diagnose(diag, timeout, None)
        return
    with DiagnosisWorker(diag, None, timeout=timeout, runs=CaseRuns(handed_over)) as worker:
        worker.start()
        yield _Diagnose(diag, timeout, worker)


def _result(
    case: Case,
    form: str,
    record: RunRecord,
    diagnose: _Diagnose,
    cache: DiagnosisCache | None,
    store: CaseStore,
) -> CaseResult:
    base = CaseResult(case.name, case.label, form, case.model, UNKNOWN, "run-failed", record.error)
    if not record.ok:
        return base
    outcome = cache.load(record) if cache is not None else None
    if outcome is None:
        outcome = diagnose(record)
        if cache is not None:
            cache.save(record, outcome)
    headline = _headline(outcome, record, store) if outcome.status == "ok" else ""
    return CaseResult(
        case.name,
        case.label,
        form,
        case.model,
        outcome.label,
        outcome.status,
        outcome.message,
        outcome.probe_steps if outcome.status in ("ok", "error") else 0,
        outcome.seconds,
        headline,
        dict(outcome.evidence),
    )


def _doctor_code() -> str:
    """Hash of the doctor's source and of the module its checks live in (the same one, or
    another it imports them from): a stored memorization check is keyed by it."""
    digest = hashlib.sha256(inspect.getsource(doctor).encode())
    home = sys.modules[doctor.Check.__module__]
    if home is not doctor:
        digest.update(inspect.getsource(home).encode())
    return digest.hexdigest()[:12]


def _headline(outcome: Outcome, record: RunRecord, store: CaseStore) -> str:
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


def _memorization(run: Run, outcome: Outcome, record: RunRecord, store: CaseStore) -> doctor.Check:
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
    "as_case_store",
    "check_not_tuned_on_suite",
    "doctor_scores",
    "evaluate_realbugs",
    "evaluate_suite",
    "handed_over",
    "render",
    "select",
]
