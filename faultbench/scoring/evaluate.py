"""Scores a diagnoser on a task: every condition, every seed, one confusion matrix."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from copy import deepcopy
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import pandas as pd
from sklearn.metrics import confusion_matrix

from faultbench.core.errors import FaultbenchError, unknown_name
from faultbench.core.limits import DEFAULT_TIMEOUT
from faultbench.faults.fault import (
    HEALTHY,
    OTHER_FAULT,
    Condition,
    answer_for,
    condition_names,
    label_of,
)
from faultbench.faults.grid import check_selection
from faultbench.scoring import answers, scores, summary
from faultbench.scoring.cache import STORED_STATUSES, DiagnosisCache, code_for
from faultbench.scoring.contract import contract_of
from faultbench.scoring.diagnosis import (
    UNDECIDED,
    UNKNOWN,
    Diagnoser,
    get_diagnoser,
    instruments_of,
    ships_with_faultbench,
)
from faultbench.scoring.harness import UNCUT, Outcome, check_timeout, diagnose_safely, run_for
from faultbench.scoring.manifest import Manifestation, manifestation
from faultbench.scoring.run import Run
from faultbench.scoring.suite import Suite, TaskSuite
from faultbench.scoring.summary import coverage
from faultbench.scoring.worker import DiagnosisWorker, wants_worker
from faultbench.storage.records import RunRecord, RunSpec
from faultbench.storage.runner import progress_bar
from faultbench.storage.store import Store
from faultbench.tasks.task import Task, get_task
from faultbench.training.engine import Engine
from faultbench.training.monitor import DEFAULT_EVERY, SAMPLINGS
from faultbench.training.trace import PREFIXES

#: The samplings a stored trace can be read at: every step, and those it kept counts for.
SAMPLINGS_READ = (1, *SAMPLINGS)

__all__ = [
    "Report",
    "RunResult",
    "coverage",
    "evaluate",
    "run_for",
]

CLOCK_FREE = STORED_STATUSES  # outcomes that do not depend on the machine's speed


@dataclass(frozen=True)
class RunResult:
    """One run's truth, the diagnoser's answer and what it cost."""

    seed: int  # the run's seed
    condition: str  # the injected condition (ground truth)
    predicted: str  # the diagnoser's label; "unknown" unless status is "ok"
    status: str  # "ok", "error", "timeout", "crashed", or "run-failed" when training failed
    confidence: float | None = None  # the diagnoser's confidence
    evidence: dict[str, Any] = field(default_factory=dict)  # why it answered so
    message: str = ""  # the error, if any
    probe_steps: int = 0  # probe training steps used by the diagnosis
    diagnose_seconds: float = 0.0  # wall time of the diagnosis
    train_seconds: float = 0.0  # wall time of the training run
    train_steps: int = 0  # optimizer steps of the training run
    severity: float | None = None  # the fault's severity, None for healthy
    also: tuple[str, ...] = ()  # further labels the diagnoser named (multi-fault runs)
    manifested: bool | None = None  # the fault visibly changed the trace (None: untested)
    deviations: tuple[str, ...] = ()  # the trace signals outside the healthy runs' spread
    variant: str = ""  # the fault's mechanism, ``fault.variant`` ('' for healthy)
    level: str = ""  # mild, moderate, severe, canonical or fixed ('' for healthy)
    design: dict[str, Any] = field(default_factory=dict)  # the drawn base's axes ({}: reference)
    key: str = ""  # the run's store key (RunSpec.key): which run was answered
    attempt: str = ""  # the attempt of that run the answer was made on
    label: str = ""  # the right answer as the suite says it ('': from the condition)
    spec: RunSpec | None = None  # the run answered (its condition, seed, design, instruments)

    @property
    def drawn(self) -> bool:
        """Whether the run trained on a drawn base rather than the task's reference recipe."""
        return bool(self.design)

    @property
    def truth(self) -> str:
        """The right answer: the condition's fault label, ``other_fault`` for a held-out one
        (or what the suite says: a real bug's label, healthy on its fixed twin)."""
        return self.label or answer_for(self.condition)

    @property
    def correct(self) -> bool:
        """Whether the answer names the injected condition (see :attr:`truth`)."""
        return self.status == "ok" and self.predicted == self.truth


@dataclass(frozen=True)
class Report:
    """The score of one diagnoser on one task."""

    diagnoser: str  # the diagnoser's name
    task: str  # the task's name
    tuned: bool  # True when the task is in the diagnoser's ``tuned_on``
    tuned_on: tuple[str, ...]  # what the diagnoser declared
    results: tuple[RunResult, ...]  # one per run, sorted by condition then seed
    trained: int = 0  # runs trained by this evaluation (the rest were stored)
    notes: tuple[str, ...] = ()  # stale or broken records met on the way
    not_applicable: tuple[tuple[str, str], ...] = ()  # faults the task declares moot, and why
    grid: str = "custom"  # the grid scored: full, classic, or custom (conditions given)
    every: int = DEFAULT_EVERY  # the sampling the traces were read at (Monitor's every)
    prefix: float = 1.0  # the share of each run's steps it was read at (1.0: whole runs)
    redraws: int = 0  # drawn designs that did not train healthy and were drawn again
    passed_over: tuple[tuple[str, int, str], ...] = ()  # (variant, seed, why) not applicable
    instruments: tuple[str, ...] = ()  # instruments attached to the loop of every scored run

    def scored_frame(self) -> pd.DataFrame:
        """One row per diagnosis in the columns of :data:`faultbench.scoring.scores.COLUMNS`."""
        from faultbench.scoring.scores import HELDOUT, KNOWN

        rows = []
        for r in self.results:
            label = r.label or label_of(r.condition)
            kind = HEALTHY if label == HEALTHY else HELDOUT if r.truth == OTHER_FAULT else KNOWN
            rows.append(
                {
                    "diagnoser": self.diagnoser,
                    "task": self.task,
                    "tuned": self.tuned,
                    "seed": r.seed,
                    "truth": label,
                    "kind": kind,
                    "variant": r.variant,
                    "level": r.level,
                    "grid": self.grid,
                    "predicted": r.predicted,
                    "status": r.status,
                    "probe_steps": r.probe_steps,
                    "diagnose_seconds": r.diagnose_seconds,
                    "drawn": r.drawn,
                    "every": self.every,
                }
            )
        return pd.DataFrame(rows, columns=list(scores.COLUMNS))

    def design_frame(self) -> pd.DataFrame:
        """One row per (healthy drawn run, design axis): diagnoser, task, seed, axis, the
        run's value of it, and whether the answer was an alarm (see
        :func:`faultbench.reporting.leaderboard.alarms_by_axis`)."""
        rows = [
            {
                "diagnoser": self.diagnoser,
                "task": self.task,
                "seed": r.seed,
                "axis": axis,
                "value": str(value),
                "alarm": r.status == "ok" and scores.raises_alarm(r.predicted),
            }
            for r in self.results
            if r.condition == HEALTHY and r.drawn
            for axis, value in r.design.items()
        ]
        return pd.DataFrame(rows, columns=["diagnoser", "task", "seed", "axis", "value", "alarm"])

    @property
    def scores(self) -> dict[str, Any]:
        """Identification (overall, per level, per variant), detection, false alarms and probe
        steps, each share with its 95% Wilson interval (:func:`faultbench.scoring.scores.summary`).

        Seconds are left out: a wall-clock measurement, the same runs give other seconds.
        """
        found = scores.summary(self.scored_frame())
        found["cost"] = {"probe_steps": found["cost"]["probe_steps"]}
        return scores.to_jsonable(found)

    @property
    def labels(self) -> list[str]:
        """Row labels of the confusion matrix: the conditions evaluated."""
        names = condition_names()
        present = {r.condition for r in self.results}
        return [n for n in names if n in present] + sorted(present - set(names))

    @property
    def correct(self) -> int:
        """Runs named correctly."""
        return sum(r.correct for r in self.results)

    @property
    def total(self) -> int:
        """Runs scored."""
        return len(self.results)

    @property
    def accuracy(self) -> float:
        """``correct / total``."""
        return self.correct / self.total if self.total else float("nan")

    @property
    def failures(self) -> dict[str, int]:
        """How many answers were errors, timeouts, crashes, or runs that failed to train."""
        out: dict[str, int] = {}
        for r in self.results:
            if r.status != "ok":
                out[r.status] = out.get(r.status, 0) + 1
        return out

    @property
    def failure_messages(self) -> list[tuple[str, str, int]]:
        """(status, first line of the message, runs) of each distinct failure, commonest first."""
        counts: dict[tuple[str, str], int] = {}
        for r in self.results:
            if r.status != "ok":
                key = (r.status, (r.message.strip().splitlines() or ["(no message)"])[0])
                counts[key] = counts.get(key, 0) + 1
        ranked = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
        return [(status, line, n) for (status, line), n in ranked]

    @property
    def seeds(self) -> list[int]:
        """The seeds evaluated."""
        return sorted({r.seed for r in self.results})

    def confusion_for(self, results: Sequence[RunResult] | None = None) -> pd.DataFrame:
        """Confusion matrix (rows: truth, columns: prediction incl. ``unknown``).

        The columns are the labels of the report's conditions and any other label
        answered: a label no run of this task has and no answer gave (a language
        model's fault on digits) would be a column of zeros.
        """
        results = self.results if results is None else results
        rows = self.labels
        shown = {label_of(r.condition) for r in self.results} | {r.predicted for r in results}
        columns = [name for name in condition_names() if name in shown] + [UNKNOWN]
        columns += sorted({r.predicted for r in results} - set(columns))
        labels = list(dict.fromkeys([*columns, *rows]))  # truths such as "a+b" are no answer
        matrix = (
            confusion_matrix(
                [r.condition for r in results], [r.predicted for r in results], labels=labels
            )
            if results
            else [[0] * len(labels) for _ in labels]
        )
        frame = pd.DataFrame(matrix, index=labels, columns=labels).loc[rows, columns]
        frame.index.name, frame.columns.name = "true", "predicted"
        return frame

    @property
    def confusion(self) -> pd.DataFrame:
        """Confusion matrix over every seed."""
        return self.confusion_for()

    @property
    def per_seed(self) -> dict[int, pd.DataFrame]:
        """One confusion matrix per seed."""
        return {s: self.confusion_for([r for r in self.results if r.seed == s]) for s in self.seeds}

    @property
    def seed_scores(self) -> pd.DataFrame:
        """Correct and total per seed."""
        rows = [
            {
                "seed": s,
                "correct": sum(r.correct for r in self.results if r.seed == s),
                "total": sum(1 for r in self.results if r.seed == s),
            }
            for s in self.seeds
        ]
        return pd.DataFrame(rows).set_index("seed")

    @property
    def mean_probe_steps(self) -> float:
        """Average probe training steps per diagnosis."""
        return sum(r.probe_steps for r in self.results) / max(1, self.total)

    @property
    def mean_train_steps(self) -> float:
        """Average training steps of the diagnosed runs."""
        return sum(r.train_steps for r in self.results) / max(1, self.total)

    @property
    def manifestation(self) -> dict[str, int]:
        """Faulty runs split by what happened: named, missed though visible, invisible."""
        faulty = [r for r in self.results if r.condition != HEALTHY]
        return {
            "faulty_runs": len(faulty),
            "named": sum(r.correct for r in faulty),
            "missed_visible": sum(not r.correct and r.manifested is True for r in faulty),
            "missed_invisible": sum(not r.correct and r.manifested is False for r in faulty),
            "untested": sum(r.manifested is None for r in faulty),
            "invisible": sum(r.manifested is False for r in faulty),
        }

    def frame(self) -> pd.DataFrame:
        """One row per run: truth, answer, status and cost."""
        return pd.DataFrame([vars(r) for r in self.results])

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready summary: the CLI's ``--json``."""
        confusion = self.confusion
        return {
            "diagnoser": self.diagnoser,
            "task": self.task,
            "tuned": self.tuned,
            "tuned_on": list(self.tuned_on),
            "correct": self.correct,
            "total": self.total,
            "accuracy": self.accuracy,
            "grid": self.grid,
            "every": self.every,
            "prefix": self.prefix,
            "instruments": list(self.instruments),
            "scores": self.scores,
            "confusion": {
                t: {p: int(confusion.loc[t, p]) for p in confusion.columns} for t in confusion.index
            },
            "per_seed": {
                str(s): {"correct": int(row.correct), "total": int(row.total)}
                for s, row in self.seed_scores.iterrows()
            },
            "failures": self.failures,
            "manifestation": self.manifestation,
            "not_applicable": dict(self.not_applicable),
            "bases": {
                "drawn": sum(r.drawn for r in self.results if r.condition == HEALTHY),
                "redraws": self.redraws,
                "passed_over": [
                    {"variant": v, "seed": seed, "why": why} for v, seed, why in self.passed_over
                ],
            },
            "coverage": coverage(self.results),
            "mean_probe_steps": self.mean_probe_steps,
            "mean_train_steps": self.mean_train_steps,
            "trained": self.trained,
            "runs": [
                {
                    "seed": r.seed,
                    "condition": r.condition,
                    "variant": r.variant,
                    "level": r.level,
                    "predicted": r.predicted,
                    "also": list(r.also),
                    "status": r.status,
                    "message": r.message,
                    "design": r.design,
                    "manifested": r.manifested,
                    "deviations": list(r.deviations),
                    "probe_steps": r.probe_steps,
                }
                for r in self.results
            ],
            "notes": list(self.notes),
        }

    def __repr__(self) -> str:
        split = "tuned-on" if self.tuned else "held-out"
        failed = sum(self.failures.values())
        return (
            f"<Report {self.diagnoser} on {self.task} ({split}): {self.correct}/{self.total} "
            f"correct, {failed} failed answers>"
        )

    def __str__(self) -> str:
        """The short summary ``faultbench run`` prints: matrix with a legend, then the scores."""
        return summary.render(self)


def evaluate(
    diagnoser: str | Diagnoser,
    task: str | Task | Suite,
    *,
    seeds: int = 5,
    conditions: Sequence[Condition] | None = None,
    grid: str = "full",
    faults: Sequence[str] | None = None,
    variants: Sequence[str] | None = None,
    levels: Sequence[str] | None = None,
    healthy_seeds: int | None = None,
    every: int = DEFAULT_EVERY,
    prefix: float = 1.0,
    store: Store | str | None = None,
    engine: Engine | None = None,
    timeout: float = DEFAULT_TIMEOUT,
    isolate: bool | None = None,
    progress: bool | None = None,
    worker: DiagnosisWorker | None = None,
) -> Report:
    """Score ``diagnoser`` on every run of a suite: a task's grid, or any :class:`Suite`.

    Stored runs are reused; missing ones are trained on ``engine`` (in this
    process when omitted, which then runs the pinned CPU kernels from here on:
    :mod:`faultbench.core.kernels`) and stored. A diagnoser that declares an instrument
    (``instrument = "cockpit"``) is scored on the same runs trained with it
    attached to their loop: records of their own, trained (and stored) only for
    the runs it is scored on. A shipped diagnoser asked for by its
    name has its answers stored beside the runs and read back by the next
    call with the same code (:mod:`faultbench.scoring.cache`). Every
    argument, the store and the diagnoser are checked before the first run trains.

    Args:
        diagnoser: A registered name, ``module:Class``, or a diagnoser object.
        task: A registered task name or a :class:`Task` (its grid, chosen by the
            arguments below), or a :class:`~faultbench.scoring.suite.Suite` (the
            real-bug suite: ``faultbench.realbugs.storage.RealBugSuite``), which
            says its runs itself: the grid arguments are then ignored.
        seeds: Runs per fault point: seeds 0 to ``seeds - 1`` on the reference
            recipe, or the first ``seeds`` drawn bases the fault applies to on
            the full grid (:mod:`faultbench.scoring.plan`).
        conditions: The conditions to run (a "custom" grid, on the reference
            recipe); when given, ``grid`` and the selection below are ignored.
        grid: "full" (drawn bases; every variant at its calibrated levels and
            the held-out faults) or "classic" (the task's reference recipe; the
            nine at their canonical severities); see :mod:`faultbench.faults.grid`.
        faults: Keep only these faults of the grid (healthy always stays).
        variants: Keep only these variants (``fault.variant`` or the bare name).
        levels: Keep only these severity levels (mild, moderate, severe, ...).
        healthy_seeds: Healthy runs of the full grid, each on its own drawn base
            (default :data:`~faultbench.scoring.plan.HEALTHY_SEEDS`; at least ``seeds``).
        every: Read each trace as ``Monitor(every=every)`` would have recorded it:
            the Monitor's default by default, the trace a practitioner has; 1 for
            every step (see :meth:`~faultbench.training.trace.Trace.sampled`).
        prefix: Read each run cut at this share of its steps, as a run stopped there
            would have it (one of :data:`~faultbench.training.trace.PREFIXES`, or 1.0:
            the whole run; see :meth:`~faultbench.training.trace.Trace.prefix`). A
            diagnoser whose instruments recorded the run is answered ``undecided`` on
            every prefix: their records hold the whole run and cannot be cut.
        store: Where records live; :func:`faultbench.storage.store.default_root` by default.
        engine: Where training runs; see :func:`faultbench.training.engine.make_engine`.
        timeout: Seconds one diagnosis may take before it counts as a timeout (positive).
        isolate: Diagnose in a worker process that is killed at the timeout
            (see :mod:`faultbench.scoring.worker`). None: yes, unless the
            diagnoser ships with faultbench or its class lives in ``__main__``.
        progress: Progress lines on stderr; False hides them.
        worker: Where to diagnose when ``diagnoser`` runs in a worker process: this
            one, handed this suite's runs and left open for the caller's next
            evaluation (one process for a diagnoser's every evaluation of a board);
            it must hold ``diagnoser`` itself (the object, as prepared here).

    Returns:
        The report.

    Raises:
        FaultbenchError: unknown names, ``seeds`` or ``healthy_seeds`` below 1, an
            ``every`` the stored traces cannot be read at, a timeout that is not a
            positive number, a store that cannot be one, a diagnoser that breaks its
            contract or does not load in a worker process, one the suite refuses (tuned
            on the real-bug suite), or a run to train in this process after torch
            ran here with other CPU kernels (:class:`faultbench.core.kernels.Unpinned`:
            pass a local engine).
    """
    for name, value in (("seeds", seeds), ("healthy_seeds", healthy_seeds), ("every", every)):
        if value is None and name == "healthy_seeds":
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise FaultbenchError(f"{name} must be an integer of at least 1; got {value!r}")
    if every not in SAMPLINGS_READ:
        raise unknown_name("every", str(every), [str(k) for k in SAMPLINGS_READ])
    if prefix not in (*PREFIXES, 1.0):
        raise unknown_name("prefix", f"{prefix:g}", [f"{p:g}" for p in (*PREFIXES, 1.0)])
    timeout = check_timeout(timeout)
    diag = get_diagnoser(diagnoser)
    contract = contract_of(diag)
    refs = instruments_of(diag)  # an unknown instrument fails here, before any training
    if not isinstance(task, (str, Task)):
        suite: Suite = task
    else:
        check_selection(grid, faults, variants, levels)
        suite = TaskSuite(
            get_task(task),
            grid,
            seeds,
            tuple(conditions) if conditions else None,
            tuple(faults) if faults is not None else None,
            tuple(variants) if variants is not None else None,
            tuple(levels) if levels is not None else None,
            healthy_seeds,
            every,
            prefix,
        )
    suite.check(diag)
    the_store = store if isinstance(store, Store) else Store(store)
    the_store.check()
    in_worker, note = wants_worker(diag, isolate)
    # A worker refuses a diagnoser it cannot be sent (pickled) here, before any training;
    # answers are stored for shipped diagnosers only, which never need a worker.
    with diagnoser_for(diag, suite.runs(), timeout, in_worker, worker) as diagnose:
        the_plan = suite.plan(store=the_store, engine=engine, progress=progress)
        the_plan = the_plan.with_instruments(refs)
        specs = the_plan.specs
        where = dict((spec, point) for point, spec in the_plan.runs)
        if suite.prefix < 1.0 and refs:  # never from the whole run
            diagnose = _Uncut(tuple(ref.name for ref in refs))
        stored = stored_answers(diagnoser, diag, the_store, suite.every, suite.prefix)
        answered = stored is not None and stored.answers_all(specs)
        if stored is not None:
            diagnose = _Stored(diagnose, stored)
        if contract.prepare is not None and not answered:  # e.g. fit a learned model: not
            contract.prepare(store=the_store, engine=engine)  # part of any one diagnosis's time
        diagnose.start()  # a worker process loads the prepared diagnoser before any training
        scored, trained = _records(
            suite, specs, stored if refs else None, the_store, engine, progress
        )
        desc = f"diagnosing {suite.name} ({diag.name})"
        with progress_bar(len(scored), desc, unit="run", show=progress) as bar:
            results = []
            for spec, record in scored:
                point = where[spec]
                one = _score_one(diagnose, spec, record)
                design = spec.design.axes() if spec.design is not None else {}
                results.append(
                    replace(
                        one,
                        variant=point.variant,
                        level=point.level,
                        design=design,
                        label=suite.truth(point),  # '' on a grid: the condition's
                        spec=spec,
                    )
                )
                bar.update()
    more = 0
    reference = suite.healthy_reference(scored, store=the_store, engine=engine)
    if reference is not None:
        healthy, more = reference
        results = _with_manifestation(results, [record for _, record in scored], healthy)
    order = {name: i for i, name in enumerate(condition_names())}
    results.sort(key=lambda r: (order.get(r.condition, len(order)), r.condition, r.seed))
    answers.flush_all()  # this evaluation's answers, written for the next process to read
    return Report(
        diagnoser=diag.name,
        task=suite.name,
        tuned=suite.tuned(diag),
        tuned_on=tuple(sorted(diag.tuned_on)),
        results=tuple(results),
        trained=trained + more,
        notes=tuple([*the_store.notes, *([note] if note else []), *suite.notes()]),
        not_applicable=suite.not_applicable(),
        grid=the_plan.grid,
        every=suite.every,
        prefix=suite.prefix,
        redraws=the_plan.redraws,
        passed_over=tuple(
            (variant, seed, why)
            for variant, out in the_plan.passed_over.items()
            for seed, why in out
        ),
        instruments=tuple(ref.name for ref in refs),
    )


class Diagnose(Protocol):
    """Turns a stored record into its outcome: in a worker process, or here."""

    def start(self) -> None:
        """Get ready (a worker loads the diagnoser); raise FaultbenchError if it cannot."""

    def diagnose(self, record: RunRecord) -> Outcome:
        """The outcome of diagnosing ``record``'s run."""
        ...


@contextlib.contextmanager
def diagnoser_for(
    diag: Diagnoser,
    runs: Callable[[RunRecord], Run],
    timeout: float,
    in_worker: bool,
    worker: DiagnosisWorker | None = None,
) -> Iterator[Diagnose]:
    """Where ``diag`` diagnoses the records ``runs`` turns into runs: a worker process that
    is killed at ``timeout`` (``in_worker``): ``worker``, kept open, when given; or this
    process."""
    if not in_worker:
        yield _InProcess(diag, runs, timeout)
        return
    if worker is not None:
        worker.use(runs)
        yield worker
        return
    with DiagnosisWorker(diag, None, timeout=timeout, runs=runs) as worker:  # refuses an
        yield worker  # unpicklable one


@dataclass(frozen=True)
class _InProcess:
    """Diagnoses in this process (the shipped diagnosers, or ``isolate=False``)."""

    diag: Diagnoser  # the diagnoser
    runs: Callable[[RunRecord], Run]  # builds the run a diagnoser is handed
    timeout: float  # seconds per diagnosis

    def start(self) -> None:
        """Nothing to start."""

    def diagnose(self, record: RunRecord) -> Outcome:
        """Rebuild the run and diagnose it safely, here."""
        try:  # a copy: the record is the store's, shared by every diagnoser after this one
            run = self.runs(deepcopy(record))
        except Exception as exc:  # a broken setup must not stop the other runs
            return Outcome("error", UNKNOWN, message=f"building the run failed: {exc!r}")
        return diagnose_safely(self.diag, run, timeout=self.timeout)


def stored_answers(
    asked: str | Diagnoser, diag: Diagnoser, store: Store, every: int, prefix: float = 1.0
) -> DiagnosisCache | None:
    """Where ``diag``'s answers are stored, if they can be (see :mod:`faultbench.scoring.cache`):
    a diagnoser that ships with faultbench, asked for by its registered name."""
    if not (isinstance(asked, str) and ":" not in asked and ships_with_faultbench(diag)):
        return None
    return DiagnosisCache(store, diag.name, code_for(diag), every, prefix)


@dataclass(frozen=True)
class _Uncut:
    """Answers ``undecided`` on a prefix of a run whose instruments' records hold the whole
    run (:data:`~faultbench.scoring.harness.UNCUT`): never an answer from the whole run."""

    instruments: tuple[str, ...]  # the diagnoser's instruments

    def start(self) -> None:
        """Nothing to start."""

    def diagnose(self, record: RunRecord) -> Outcome:
        """``undecided``, saying why."""
        return Outcome(
            "ok", UNDECIDED, evidence={"not_cut": f"{UNCUT}: {', '.join(self.instruments)}"}
        )


@dataclass(frozen=True)
class _Stored:
    """Reads a stored answer; diagnoses (and stores the answer) only where there is none."""

    inner: Diagnose  # how a diagnosis is made
    cache: DiagnosisCache  # where answers are kept

    def start(self) -> None:
        """Start the inner one."""
        self.inner.start()

    def diagnose(self, record: RunRecord) -> Outcome:
        """The stored outcome on ``record``, else a fresh one (then stored)."""
        outcome = self.cache.load(record)
        if outcome is None:
            outcome = self.inner.diagnose(record)
            self.cache.save(record, outcome)
        return outcome


def _records(
    suite: Suite,
    specs: Sequence[RunSpec],
    stored: DiagnosisCache | None,
    store: Store,
    engine: Engine | None,
    progress: bool | None,
) -> tuple[list[tuple[RunSpec, RunRecord]], int]:
    """Each spec's record, trained where missing; and how many were trained.

    With ``stored`` (a diagnoser with an instrument whose answers are kept), a run it has
    answered is never trained with its instrument again (TrainCheck traces a run for a
    minute): the plain run stands in for it, under the answered run's key and attempt, so
    its answer is read back and its trace (the same: an instrument never changes the run)
    serves the scores that read one. Its training seconds are then the plain run's.
    """
    answered = {}
    if stored is not None:
        for spec in specs:
            attempt = stored.attempt_of(store.key(spec))
            if attempt is not None:
                answered[spec] = attempt
    todo = [spec for spec in specs if spec not in answered]
    plain = {spec: spec.with_instruments(()) for spec in answered}
    found: dict[RunSpec, RunRecord] = {}
    trained = 0
    for spec, record, fresh in suite.records(
        [*todo, *dict.fromkeys(plain.values())], store=store, engine=engine, progress=progress
    ):
        trained += fresh
        found[spec] = record
    for spec, attempt in answered.items():
        stand_in = found[plain[spec]]
        found[spec] = replace(stand_in, spec=spec, key=store.key(spec), attempt=attempt)
    return [(spec, found[spec]) for spec in specs], trained


def _score_one(diagnose: Diagnose, spec: RunSpec, record: RunRecord) -> RunResult:
    truth = spec.condition
    severity = truth.faults[0][1] if truth.faults else None
    result = RunResult(
        seed=spec.seed,
        condition=truth.name,
        predicted=UNKNOWN,
        status="run-failed",
        severity=severity,
        key=record.key,
        attempt=record.attempt,
        train_seconds=record.seconds,
        message=record.error,
    )
    if not record.ok:
        return result
    outcome = diagnose.diagnose(record)
    # How far a diagnosis stopped at its time limit got is a measurement of the
    # machine, not of the diagnoser: its probe steps are not counted.
    steps = outcome.probe_steps if outcome.status in CLOCK_FREE else 0
    return replace(
        result,
        key=record.key,
        predicted=outcome.label,
        also=outcome.also,
        status=outcome.status,
        confidence=outcome.confidence,
        evidence=outcome.evidence,
        message=outcome.message,
        probe_steps=steps,
        diagnose_seconds=outcome.seconds,
        train_steps=record.config.steps if record.config else 0,
    )


def _with_manifestation(
    results: list[RunResult], records: list[RunRecord], healthy: list[RunRecord]
) -> list[RunResult]:
    """Each result beside the record it scored (same order): did its fault show?"""
    reference = [(r.trace, r.config) for r in healthy if r.ok and r.trace and r.config]
    attempts = tuple(r.attempt for r in healthy if r.ok and r.trace and r.config)
    against = attempts if all(attempts) else None
    out = []
    for result, record in zip(results, records, strict=True):
        if result.condition == HEALTHY or not record.ok:
            out.append(result)
            continue
        assert record.trace is not None and record.config is not None
        key = (record.attempt, against) if record.attempt and against is not None else None
        seen = _MANIFESTED.get(key) if key else None
        if seen is None:
            seen = manifestation(record.trace, record.config, reference)
            if key:
                _MANIFESTED[key] = seen
        out.append(replace(result, manifested=seen.visible, deviations=seen.deviations))
    return out


#: (run's attempt id, healthy runs' attempt ids) -> whether its fault showed. A report
#: scores every diagnoser on the same runs; an attempt id names one record for good.
_MANIFESTED: dict[tuple[str, tuple[str, ...]], Manifestation] = {}
