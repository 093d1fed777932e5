"""The suite's runs in the record store: the ONE module that knows RunSpec, RunRecord and Store.

Each case runs twice (faulty and fixed) and each form is stored as a
:class:`~faultbench.storage.records.RunRecord` in the same store as the grid's
runs, under ``<root>/realbugs/<case>.<form>/seed-<seed>/<key>/``, so a warm
report retrains nothing and the stored-answer cache
(:mod:`faultbench.scoring.cache`) keeps each shipped diagnoser's answers beside
them. A case's key is the grid's key function (:meth:`RunSpec.key`) over its own
module, the kit the scripts share and the instrumentation that records the trace
(:attr:`RunSpec.code`), each read as code (no docstrings, no comments); nothing of the
grid's recipes or faults.

Merge note: the grid's RunSpec and Trace are being extended elsewhere; a new
RunSpec field needs a value in :func:`spec_of` only, and a Trace field nothing here.
"""

from __future__ import annotations

import dataclasses
import hashlib
import inspect
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass
from functools import cache
from importlib import import_module
from pathlib import Path
from typing import Any

import torch

from faultbench.core.codetext import code_text
from faultbench.core.errors import FaultbenchError
from faultbench.faults.fault import HEALTHY, Condition
from faultbench.faults.grid import GridPoint
from faultbench.realbugs.case import Case
from faultbench.realbugs.suite import FORMS, SUITE, get_case
from faultbench.scoring.diagnosis import Diagnoser
from faultbench.scoring.plan import Plan
from faultbench.scoring.run import Run
from faultbench.storage.files import write_atomic
from faultbench.storage.records import RunRecord, RunSpec, dumps, loads
from faultbench.storage.runner import progress_bar
from faultbench.storage.store import Store, stamped
from faultbench.training.engine import Engine
from faultbench.training.monitor import DEFAULT_EVERY

THREADS = 1  # the scripts train on one thread, as the grid's runs do
#: The modules every case's trace goes through besides its own: the shared kit and the
#: Monitor with its parts (a change to any of them retrains the suite, and only that).
RECORDING = (
    "faultbench.realbugs.kit",
    "faultbench.training.monitor",
    "faultbench.training.layers",
    "faultbench.training.activations",
    "faultbench.training.widths",
    "faultbench.training.hostlog",
    "faultbench.training.hooks",
    "faultbench.training.trace",
)


@cache
def _code_hash(names: tuple[str, ...]) -> str:
    """Hash of the modules called ``names`` as code (no docstrings, no comments)."""
    digest = hashlib.sha256()
    for name in names:
        digest.update(code_text(inspect.getsource(import_module(name))).encode())
    return digest.hexdigest()[:12]


def case_fingerprint(case: Case) -> str:
    """Hash of the case's own module as code: what it trains and how (a docstring or
    comment edit keeps it, and so keeps the case's runs)."""
    return _file_hash(inspect.getsourcefile(case.script) or "")


@cache
def _file_hash(path: str) -> str:
    return hashlib.sha256(code_text(Path(path).read_text()).encode()).hexdigest()[:12]


def spec_of(case: Case, form: str) -> RunSpec:
    """The run spec of ``case`` in ``form`` ("faulty" or "fixed"): keyed, as every run
    is (:meth:`~faultbench.storage.records.RunSpec.key`), by its case's code and the
    recording code, none of the grid's recipes or faults."""
    if form not in FORMS:
        raise ValueError(f"form {form!r}; expected one of {FORMS}")
    return RunSpec(
        SUITE,
        case_fingerprint(case),
        Condition(((f"{case.name}.{form}", None),)),
        case.seed,
        code=_code_hash(RECORDING),
    )


def case_and_form(spec: RunSpec) -> tuple[Case, str]:
    """The case and form a suite run spec stands for."""
    name, _, form = spec.condition.faults[0][0].rpartition(".")
    return get_case(name), form


@dataclass(frozen=True, eq=False)
class CaseRecord:
    """One stored form of one case."""

    case: Case  # the case
    form: str  # "faulty" or "fixed"
    record: RunRecord  # its stored run
    trained: bool  # trained by this call (False: read from the store)


def train(case: Case, form: str, store: Store) -> RunRecord:
    """Run ``case``'s script in ``form`` on one thread; a failure is a failed record."""
    spec = spec_of(case, form)
    threads = torch.get_num_threads()
    torch.set_num_threads(THREADS)
    start = time.perf_counter()
    try:
        result = case.run(fixed=form == "fixed")
        trace, config, status, error = result.trace, result.config, "ok", ""
    except Exception as exc:  # a broken case must not stop the others
        trace, config, status, error = None, None, "failed", f"{type(exc).__name__}: {exc}"
    finally:
        torch.set_num_threads(threads)
    return RunRecord(
        spec=spec,
        key=store.key(spec),
        attempt="",
        status=status,
        seconds=time.perf_counter() - start,
        trace=trace,
        config=config,
        error=error,
        code_version=spec.code,
    )


def ensure(cases: Iterable[Case], store: Store) -> Iterator[CaseRecord]:
    """Every form of every case: read from ``store``, else trained now and stored.

    A process holding a run's lock trains it; another waits and reads it.
    """
    for case in cases:
        for form in FORMS:
            spec = spec_of(case, form)
            record = store.load(spec, note=False, copy=False)
            trained = False
            if record is None:
                store.require_writable()
                lock = store.lock(spec)
                lock.acquire()
                try:
                    record = store.load(spec, note=False, copy=False)
                    if record is None:
                        record = stamped(train(case, form, store))
                        store.save(record)
                        trained = True
                finally:
                    lock.release()
            yield CaseRecord(case, form, record, trained)


def run_of(record: RunRecord, *, probe: bool = True) -> Run:
    """The run a diagnoser is handed: the stored trace and config, and the script's probe.

    The probe is rebuilt by running the script with no epochs: its model factory,
    loss and training examples, exactly as the trained run had them. ``probe=False``
    leaves it out (for the checks that read the trace only).
    """
    assert record.trace is not None and record.config is not None
    case, form = case_and_form(record.spec)
    built = None
    if probe:
        threads = torch.get_num_threads()
        torch.set_num_threads(THREADS)
        try:
            built = case.run(fixed=form == "fixed", epochs=0).probe
        finally:
            torch.set_num_threads(threads)
    return Run(SUITE, record.spec.seed, record.trace, record.config, built)


@dataclass(frozen=True)
class CaseRuns:
    """Builds a suite run from its record, for the diagnosis worker process (picklable).

    ``view`` (a module-level function, so it pickles) turns the run into the one the
    diagnoser is handed; the scorer passes its own, so a run reads the same in the
    worker as in-process.
    """

    view: Callable[[Run], Run] | None = None

    def __call__(self, record: RunRecord) -> Run:
        run = run_of(record)
        return self.view(run) if self.view is not None else run


def handed_over(run: Run) -> Run:
    """The run a diagnoser (and the doctor) reads: the stored every-step run read as the
    default ``Monitor(every=20)`` records it, the trace a practitioner has (as on the grid).

    The ONE place where a stored case run becomes the run a diagnoser reads: the cases
    record every step, as the grid's loop does, and in-process and worker diagnoses and
    the doctor's headline all go through here."""
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


@dataclass(frozen=True)
class RealBugSuite:
    """The real-bug suite as a :class:`~faultbench.scoring.suite.Suite`: each case's faulty
    and fixed form, trained by the case's own script, read as the default Monitor records it.

    What ``evaluate(diagnoser, RealBugSuite(cases))`` scores, through the same store,
    answer cache, worker and progress as the grid.
    """

    cases: tuple[Case, ...]  # the cases, in order

    @property
    def name(self) -> str:
        """``realbugs``."""
        return SUITE

    @property
    def every(self) -> int:
        """The Monitor's default: what :func:`handed_over` reads."""
        return DEFAULT_EVERY

    @property
    def prefix(self) -> float:
        """1.0: a case is read whole (its script trains as many steps as its reporter's)."""
        return 1.0

    def check(self, diagnoser: Diagnoser) -> None:
        """Refuse a diagnoser tuned on the suite (a test set)."""
        check_not_tuned_on_suite(diagnoser)

    def tuned(self, diagnoser: Diagnoser) -> bool:
        """Never: no diagnoser may be tuned on the suite."""
        return False

    def plan(self, *, store: Store, engine: Engine | None, progress: bool | None) -> Plan:
        """Every case's faulty then fixed form."""
        runs = tuple(
            (
                GridPoint(spec.condition, case.name, form, SUITE),
                spec,
            )
            for case in self.cases
            for form in FORMS
            for spec in (spec_of(case, form),)
        )
        return Plan(None, runs)

    def records(
        self,
        specs: Sequence[RunSpec],
        *,
        store: Store,
        engine: Engine | None,
        progress: bool | None,
    ) -> Iterator[tuple[RunSpec, RunRecord, bool]]:
        """Each form's record: read, or trained now by its script and stored. A case's
        script has no instrument: a diagnoser that declares one gets the plain run (its
        instrument's record absent), under the spec it asked for."""
        asked = {spec.condition: spec for spec in specs}
        chosen = [
            case for case in self.cases if any(spec_of(case, f).condition in asked for f in FORMS)
        ]
        with progress_bar(len(specs), f"training {SUITE}", unit="run", show=progress) as bar:
            for item in ensure(chosen, store):
                bar.update()
                if item.record.spec.condition in asked:
                    yield asked[item.record.spec.condition], item.record, item.trained

    def runs(self) -> Callable[[RunRecord], Run]:
        """:func:`run_of`, then :func:`handed_over` (picklable, for a worker)."""
        return CaseRuns(handed_over)

    def truth(self, point: GridPoint) -> str:
        """The case's label on its faulty form, healthy on its fixed twin."""
        return get_case(point.variant).label if point.level == "faulty" else HEALTHY

    def notes(self) -> list[str]:
        """Nothing to add."""
        return []

    def not_applicable(self) -> tuple[tuple[str, str], ...]:
        """No fault is moot on a case."""
        return ()

    def healthy_reference(
        self, scored: Sequence[tuple[RunSpec, RunRecord]], *, store: Store, engine: Engine | None
    ) -> None:
        """None: a case's runs are not compared with the grid's healthy runs."""
        return None


def _check_path(store: Store, record: RunRecord, code: str) -> Path:
    return store.spec_dir(record.spec) / record.key / "doctor" / f"{code}-{record.attempt}.json"


def load_check(store: Store, record: RunRecord, code: str) -> dict[str, Any] | None:
    """A stored doctor check on ``record`` (made by doctor code ``code``), or None."""
    try:
        return loads(_check_path(store, record, code).read_text())  # type: ignore[no-any-return]
    except (OSError, ValueError):
        return None


def save_check(store: Store, record: RunRecord, code: str, check: Any) -> None:
    """Keep a doctor check (a dataclass) beside ``record``; a read-only store keeps nothing."""
    try:  # a read-only store keeps nothing
        write_atomic(_check_path(store, record, code), dumps(asdict(check)))
    except OSError:
        return
