"""The suite's runs in the record store: the ONE module that knows RunSpec, RunRecord and Store.

Each case runs twice (faulty and fixed) and each form is stored as a
:class:`~faultbench.storage.records.RunRecord` in the same store as the grid's
runs, under ``<root>/realbugs/<case>.<form>/seed-<seed>/<key>/``, so a warm
report retrains nothing and the stored-answer cache
(:mod:`faultbench.scoring.cache`) keeps each shipped diagnoser's answers beside
them. A case's key hashes its own module, the kit the scripts share and the
instrumentation that records the trace; nothing of the grid's recipes or faults.

Merge note: the grid's RunSpec and Trace are being extended elsewhere; a new
RunSpec field needs a value in :func:`spec_of` only, and a Trace field nothing here.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import os
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass
from importlib import import_module
from pathlib import Path
from typing import Any

import torch

from faultbench.faults.fault import Condition
from faultbench.realbugs.case import Case
from faultbench.realbugs.suite import FORMS, SUITE, get_case
from faultbench.scoring.run import Run
from faultbench.storage.records import RunRecord, RunSpec, dumps, loads
from faultbench.storage.store import Store, stamped

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


def _source_hash(names: Iterable[str]) -> str:
    digest = hashlib.sha256()
    for name in names:
        digest.update(inspect.getsource(import_module(name)).encode())
    return digest.hexdigest()[:12]


def case_fingerprint(case: Case) -> str:
    """Hash of the case's own module: what it trains and how."""
    return _source_hash([case.script.__module__])


def spec_of(case: Case, form: str) -> RunSpec:
    """The run spec of ``case`` in ``form`` ("faulty" or "fixed")."""
    if form not in FORMS:
        raise ValueError(f"form {form!r}; expected one of {FORMS}")
    return RunSpec(
        SUITE, case_fingerprint(case), Condition(((f"{case.name}.{form}", None),)), case.seed
    )


def case_and_form(spec: RunSpec) -> tuple[Case, str]:
    """The case and form a suite run spec stands for."""
    name, _, form = spec.condition.faults[0][0].rpartition(".")
    return get_case(name), form


class CaseStore(Store):
    """The record store, keying the suite's runs by their own code (the grid's, as usual).

    Args:
        root: The store's directory; the default store's when omitted.
    """

    def key(self, spec: RunSpec) -> str:
        """A suite run's key: its spec, its case's module and the recording code."""
        if spec.task != SUITE:
            return super().key(spec)
        known = self._keys.get(spec)
        if known is None:
            payload = {
                "task": spec.task,
                "case": spec.task_fingerprint,
                "condition": [list(pair) for pair in spec.condition.faults],
                "seed": spec.seed,
                "recording": _source_hash(RECORDING),
            }
            digest = hashlib.sha256(json.dumps(payload, sort_keys=True).encode())
            known = self._keys[spec] = digest.hexdigest()[:20]
        return known


@dataclass(frozen=True, eq=False)
class CaseRecord:
    """One stored form of one case."""

    case: Case  # the case
    form: str  # "faulty" or "fixed"
    record: RunRecord  # its stored run
    trained: bool  # trained by this call (False: read from the store)


def train(case: Case, form: str, store: CaseStore) -> RunRecord:
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
        code_version=_source_hash(RECORDING),
    )


def ensure(cases: Iterable[Case], store: CaseStore) -> Iterator[CaseRecord]:
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
    path = _check_path(store, record, code)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.part")
        tmp.write_text(dumps(asdict(check)))
        os.replace(tmp, path)
    except OSError:
        return
