"""A diagnoser's submission: score it on the board into its result file, check a file
against the installed code and runs, and re-diagnose a sample of it.

- :func:`score`: every evaluation of the board (:mod:`faultbench.scoring.board`) by the
  one :func:`~faultbench.scoring.evaluate.evaluate`, the real-bug suite included;
  training only what the store lacks, reading stored answers; a diagnoser that does
  not ship with faultbench runs in its worker process with its timeout.
- :func:`stale`: which answers were made on other runs than the installed code's
  board gives (each row's run key rebuilt from the row, no store needed).
- :func:`verify`: ``K`` answers drawn at random, diagnosed again in the diagnoser's
  worker with the file's timeout; any difference refuses the file.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import platform
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import cache
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from faultbench.core.codetext import code_text
from faultbench.core.errors import FaultbenchError
from faultbench.faults.family import draw_design
from faultbench.realbugs import all_cases, get_case
from faultbench.realbugs.storage import RealBugSuite, spec_of
from faultbench.reporting.ahead import planned
from faultbench.reporting.resultfile import ResultFile, answers_frame, decode, rows_of
from faultbench.scoring import answers
from faultbench.scoring.board import REALBUGS, Board, Evaluation
from faultbench.scoring.cache import STORED_STATUSES, DiagnosisCache, code_for
from faultbench.scoring.contract import Contract, contract_of
from faultbench.scoring.diagnosis import (
    Diagnoser,
    get_diagnoser,
    instruments_of,
    ships_with_faultbench,
)
from faultbench.scoring.evaluate import Report, _Uncut, diagnoser_for, evaluate
from faultbench.scoring.harness import Outcome
from faultbench.scoring.plan import Plan
from faultbench.scoring.suite import TaskSuite
from faultbench.scoring.worker import DiagnosisWorker, wants_worker
from faultbench.storage.records import RunSpec
from faultbench.storage.store import Store
from faultbench.tasks.task import Task, get_task
from faultbench.training.engine import Engine
from faultbench.training.instruments import references


def task_kind(task: Task) -> str:
    """What ``task`` predicts (:mod:`faultbench.tasks.kinds`): the leaderboard's per-kind
    tables group by it."""
    return task.kind.name


def code_of(diagnoser: Diagnoser) -> str:
    """The hash of the code behind ``diagnoser``'s answers: the code its diagnosis can run
    through (:func:`~faultbench.scoring.cache.code_for`: its module and what it imports of
    faultbench), and for one that does not ship with faultbench its own package's, as code.
    Editing one diagnoser's module changes its key alone."""
    if ships_with_faultbench(diagnoser):
        return code_for(diagnoser)
    return hashlib.sha256(
        f"{code_for(diagnoser)}\0{_package_code(type(diagnoser).__module__)}".encode()
    ).hexdigest()[:12]


def _package_code(module: str) -> str:
    """Hash of every source file of ``module``'s top-level package (or its one file)."""
    top = sys.modules.get(module.partition(".")[0]) or sys.modules[module]
    folders = [Path(p) for p in getattr(top, "__path__", [])]
    files = sorted(f for d in folders for f in d.rglob("*.py")) or [Path(top.__file__ or "")]
    digest = hashlib.sha256()
    for path in files:
        digest.update(code_text(path.read_text()).encode())
    return digest.hexdigest()


def software() -> dict[str, str]:
    """What the answers were made on: python, torch, the platform, faultbench."""

    def version(name: str) -> str:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            return "not installed"

    return {
        "python": platform.python_version(),
        "torch": version("torch"),
        "faultbench": version("faultbench"),
        "platform": platform.platform(),
    }


def score(
    diagnoser: str,
    board: Board,
    *,
    store: Store,
    engine: Engine | None = None,
    timeout: float,
    isolate: bool | None = None,
    progress: bool | None = None,
    keep_answers: Path | None = None,
) -> tuple[ResultFile, list[Report]]:
    """Score ``diagnoser`` (a registered name or ``module:Class``) on every evaluation of
    ``board``; return its result file (not yet written) and the reports it was made from.

    With ``keep_answers`` (its ``NAME.answers.parquet``), the answers of a diagnoser whose
    answers are stored are exported there after each evaluation, merged with those it held:
    a command stopped half-way (TrainCheck's hours) leaves what it answered, to commit, and
    a store standing on the runs dataset beside it never asks for them again.

    Raises:
        FaultbenchError: anything :func:`~faultbench.scoring.evaluate.evaluate` refuses.
    """
    diag = get_diagnoser(diagnoser)
    contract = contract_of(diag)
    start = time.perf_counter()
    keep = keep_answers if stores_answers(diagnoser, diag) else None
    with one_worker(diag, isolate, timeout) as worker:
        asked = diag if worker is not None else diagnoser  # the object the worker holds
        reports = []
        for ev in board.evaluations(diagnoser, contract):
            reports.append(
                _evaluate(ev, asked, board, store, engine, timeout, isolate, progress, worker)
            )
            if keep is not None:
                answers.merge_into(keep, _outcomes(reports[-1:], code_of(diag)))
    rows = [row for r in reports for row in rows_of(r, _kind_of(r.task))]
    result = ResultFile(
        diagnoser=diag.name,
        source=diagnoser,
        code=code_of(diag),
        contract=contract.to_dict(),
        board=board.to_dict(contract),
        timeout=timeout,
        date=datetime.now(UTC).isoformat(timespec="seconds"),
        software=software(),
        seconds=time.perf_counter() - start,
        answers=answers_frame(rows),
        outcomes=_outcomes(reports, code_of(diag)) if stores_answers(diagnoser, diag) else None,
    )
    return result, reports


def stores_answers(asked: str, diag: Diagnoser) -> bool:
    """Whether ``diag``'s answers are stored (a shipped diagnoser asked for by its name):
    its result file then exports them whole, for a fresh clone."""
    return ":" not in asked and ships_with_faultbench(diag)


def _outcomes(reports: Sequence[Report], code: str) -> list[dict[str, Any]]:
    """Every answer of ``reports`` that does not depend on the clock, whole."""
    return [
        answers.row_of(
            (r.key, r.attempt, report.every, report.prefix),
            Outcome(
                r.status,
                r.predicted,
                r.confidence,
                r.evidence,
                r.message,
                r.probe_steps,
                r.diagnose_seconds,
                r.also,
            ),
            code,
        )
        for report in reports
        for r in report.results
        if r.status in STORED_STATUSES and r.attempt
    ]


@contextlib.contextmanager
def one_worker(
    diag: Diagnoser, isolate: bool | None, timeout: float
) -> Iterator[DiagnosisWorker | None]:
    """One worker process for every evaluation of ``diag`` (None where it diagnoses in this
    process): each start costs its imports, a second or more."""
    in_worker, _ = wants_worker(diag, isolate)
    if not in_worker:
        yield None
        return
    with DiagnosisWorker(diag, None, timeout=timeout) as worker:  # each suite hands over
        yield worker  # its runs


def _evaluate(
    ev: Evaluation,
    asked: str | Diagnoser,
    board: Board,
    store: Store,
    engine: Engine | None,
    timeout: float,
    isolate: bool | None,
    progress: bool | None,
    worker: DiagnosisWorker | None = None,
) -> Report:
    if ev.grid == REALBUGS:
        cases = all_cases() if board.cases is None else tuple(map(get_case, board.cases))
        return evaluate(
            asked,
            RealBugSuite(cases),
            store=store,
            engine=engine,
            timeout=timeout,
            isolate=isolate,
            progress=progress,
            worker=worker,
        )
    suite = _PlannedOnce(
        get_task(ev.task),
        ev.grid,
        ev.seeds,
        faults=ev.faults,
        healthy_seeds=ev.healthy_seeds,
        every=ev.every,
        prefix=ev.prefix,
    )
    return evaluate(
        asked,
        suite,
        store=store,
        engine=engine,
        timeout=timeout,
        isolate=isolate,
        progress=progress,
        worker=worker,
    )


@dataclass(frozen=True)
class _PlannedOnce(TaskSuite):
    """A task's grid planned once in this process (:func:`~faultbench.reporting.ahead
    .planned`): a diagnoser's evaluations at each sampling and prefix, and every other
    diagnoser's, score the same runs, and a report had planned them 3,318 times."""

    def plan(self, *, store: Store, engine: Engine | None, progress: bool | None) -> Plan:
        """The grid's runs, as :meth:`TaskSuite.plan` finds them, made once."""
        return planned(
            store,
            self.task.name,
            self.grid,
            self.seeds,
            self.healthy_seeds,
            self.faults,
            engine,
            progress,
        )


def _kind_of(task: str) -> str:
    return "" if task == REALBUGS else task_kind(get_task(task))


def spec_of_row(row: Any, contract: Contract) -> RunSpec:
    """The run an answer was made on, rebuilt from the row with the installed code (no
    store): the real-bug case's form, or the task's condition on its seed and base."""
    return _spec(
        row.suite, row.task, row.condition, int(row.seed), int(row.base), contract.instrument
    )


@cache
def _spec(
    suite: str, task_name: str, condition: str, seed: int, base: int, instrument: tuple[str, ...]
) -> RunSpec:
    """:func:`spec_of_row`'s spec, once per run: every file of a board names the same runs."""
    if suite == REALBUGS:
        name, _, form = condition.rpartition(".")
        return spec_of(get_case(name), form)
    task = get_task(task_name)
    design = draw_design(task, seed, base) if base >= 0 else None
    spec = RunSpec(task.name, task.fingerprint, decode(condition), seed, design)
    refs = references(instrument) if instrument else ()
    return spec.with_instruments(refs) if refs else spec


def stale(result: ResultFile) -> list[str]:
    """The run keys of ``result`` that the installed code does not give (empty: every
    answer was made on the runs the board has now)."""
    contract = _contract(result)
    out = []
    for row in result.answers.itertuples(index=False):
        try:
            key = _key(spec_of_row(row, contract))
        except (FaultbenchError, ValueError) as exc:  # a task, case or fault gone since
            out.append(f"{row.task}/{row.condition}/seed {row.seed} ({exc})")
            continue
        if key != row.key:
            out.append(f"{row.task}/{row.condition}/seed {row.seed}")
    return out


@cache
def _key(spec: RunSpec) -> str:
    """``spec.key()`` once per spec: every file of a board asks for the same runs."""
    return spec.key()


def _contract(result: ResultFile) -> Contract:
    declared = result.contract
    return Contract(
        name=result.diagnoser,
        tuned_on=frozenset(declared["tuned_on"]),
        instrument=tuple(declared["instrument"]),
        reads_trace=declared["reads_trace"],
        subset_seeds=declared["subset_seeds"],
        subset_full_grid=declared.get("subset_full_grid", "all"),  # files made before it
        left_out_of_report=declared["left_out_of_report"],
        probes=declared["probes"],
    )


def verify(result: ResultFile, k: int, *, store: Store, seed: int | None = None) -> list[str]:
    """Diagnose ``k`` of ``result``'s answers again, drawn at random among those that do not
    depend on the clock, in the diagnoser's worker with the file's timeout.

    Returns:
        One line per answer that differs (empty: the file holds what its code says).

    Raises:
        FaultbenchError: the diagnoser does not load, its code is not the installed code's,
            or a drawn run is not in ``store``.
    """
    diag = get_diagnoser(result.source)
    if code_of(diag) != result.code:
        raise FaultbenchError(
            f"{result.path}: made by code {result.code}, but the installed code of "
            f"'{result.diagnoser}' is {code_of(diag)}; refresh it: faultbench score "
            f"--diagnoser {result.source}"
        )
    answers = result.answers[result.answers["status"].isin(STORED_STATUSES)]
    rng = np.random.default_rng(seed)
    drawn = answers.iloc[rng.permutation(len(answers))[:k]] if len(answers) else answers
    contract = contract_of(diag)
    if contract.prepare is not None:
        contract.prepare(store=store, engine=None)
    instruments = tuple(ref.name for ref in instruments_of(diag))
    differ = []
    groups = drawn.groupby(["suite", "task", "every", "prefix"], sort=False)
    with one_worker(diag, None, result.timeout) as worker:
        for (suite, task, every, prefix), part in groups:
            runs = (
                RealBugSuite(all_cases()).runs()
                if suite == REALBUGS
                else TaskSuite(get_task(task), every=int(every), prefix=float(prefix)).runs()
            )
            with diagnoser_for(diag, runs, result.timeout, worker is not None, worker) as inner:
                # As evaluate scored it: a run cut at a prefix is never asked of a diagnoser
                # whose instruments recorded it (their records hold the whole run): undecided.
                cut = float(prefix) < 1.0 and instruments
                diagnose: Any = _Uncut(instruments) if cut else inner
                diagnose.start()
                for row, record in _records(part, contract, store):
                    outcome = diagnose.diagnose(record)
                    now = (outcome.status, outcome.label, "+".join(outcome.also))
                    then = (row.status, row.predicted, row.also)
                    if now != then:
                        differ.append(
                            f"{row.task}/{row.condition}/seed {row.seed} (every {row.every}): "
                            f"the file says {'/'.join(then).rstrip('/')}, the diagnoser now "
                            f"says {'/'.join(now).rstrip('/')}"
                        )
    return differ


def _records(part: pd.DataFrame, contract: Contract, store: Store) -> Iterator[tuple[Any, Any]]:
    for row in part.itertuples(index=False):
        spec = spec_of_row(row, contract)
        record = store.load(spec, note=False, copy=False)
        if record is None or record.key != row.key:
            raise FaultbenchError(
                f"run {row.task}/{row.condition}/seed {row.seed} of the file is not in the "
                f"store '{store.root}'; expected the store its answers were made on "
                f"(--store DIR), or score it again: faultbench score --diagnoser "
                f"{contract.name}"
            )
        yield row, record


def _codes(store: Store, diagnoser: str) -> list[str]:
    """The codes ``diagnoser``'s answers are stored under in ``store``, newest first, and its
    installed code's (the answers exported beside the runs dataset are under it)."""
    folder = store.root / answers.FOLDER / diagnoser
    found = sorted(folder.glob("*/"), key=lambda p: p.stat().st_mtime, reverse=True)
    try:
        installed = [code_for(get_diagnoser(diagnoser))]
    except FaultbenchError:
        installed = []
    return list(dict.fromkeys([*installed, *(p.name for p in found)]))


def evidence_from(store: Store) -> Any:
    """``(diagnoser, row) -> str``: the evidence of an answer, read from ``store``'s stored
    answer (:mod:`faultbench.scoring.cache`), or '' where it holds none (a diagnoser that
    does not ship with faultbench, another store)."""
    contracts: dict[str, Contract] = {}
    codes: dict[str, list[str]] = {}

    def find(diagnoser: str, row: Any) -> str:
        try:
            contract = contracts.setdefault(diagnoser, Contract(diagnoser, frozenset()))
            spec = spec_of_row(row, contract)
        except (FaultbenchError, ValueError):
            return ""
        record = store.load(spec, note=False, copy=False)
        if record is None or record.key != row.key:
            return ""
        if diagnoser not in codes:
            codes[diagnoser] = _codes(store, diagnoser)
        for code in codes[diagnoser]:
            cache = DiagnosisCache(store, diagnoser, code, int(row.every), float(row.prefix))
            outcome = cache.load(record)
            if outcome is not None:
                return json.dumps(outcome.evidence, sort_keys=True, default=str)
        return ""

    return find
