"""One result file per diagnoser: every answer it gave on the board, and what it ran on.

``results/diagnosers/<name>.json`` is a small header (asv's result files are the
model): the schema version, the diagnoser's name and how to load it, its code hash
and declared contract (:mod:`faultbench.scoring.contract`), the board it was scored
on (:class:`faultbench.scoring.board.Board`), the timeout, the date, the software
(python, torch, platform) and the wall seconds of the command that wrote it (runs it
trained included; a command that went on from runs an earlier one stored counts its own
part only: TrainCheck's file is made over several), and a checksum over the
header and the answers. ``results/diagnosers/<name>.csv`` holds the answers, one
line each, sorted, in :data:`COLUMNS`: no evidence (it stays beside the run in the
store), so the file is compact and a rerun that changes one answer changes one line.

A file of an old schema, a truncated or hand-edited one (its checksum no longer
matches) is refused by :func:`read` with its path and the fix, before anything is
written from it.
"""

from __future__ import annotations

import hashlib
import io
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from faultbench.core.errors import FaultbenchError
from faultbench.faults.fault import Condition, label_of
from faultbench.scoring import answers as answer_tables
from faultbench.scoring.evaluate import Report
from faultbench.storage.files import write_atomic

SCHEMA = 1  # bump when the layout changes; an older file is refused with the fix
KIND = "faultbench.result"
FOLDER = "diagnosers"  # under the results directory
PREFIX_WHOLE = 1.0  # the share of a run's steps a diagnoser read: 1.0, the whole run
#: The answers' columns, in order, with what each holds.
COLUMNS = {
    "key": "the run's store key (RunSpec.key): which run was answered",
    "suite": "grid or realbugs",
    "task": "the task's name (realbugs for the real-bug suite)",
    "task_kind": "what the task predicts (multiclass, next_token, ...; '' for real bugs)",
    "grid": "classic, full or realbugs",
    "every": "the sampling the trace was read at (the Monitor's every)",
    "prefix": "the share of the run's steps the diagnoser read (1 for the whole run)",
    "condition": "what the run has: fault[.variant]@severity joined by +, healthy, or case.form",
    "truth": "the label a perfect diagnoser answers (a held-out fault: its own name)",
    "variant": "the fault's mechanism, or the real-bug case ('' for healthy)",
    "level": "mild, moderate, severe, canonical, fixed, or the case's form",
    "seed": "the run's seed",
    "base": "the drawn base's attempt at its seed (-1: the task's reference recipe)",
    "predicted": "the answer (unknown unless status is ok)",
    "also": "further labels it named, joined by +",
    "status": "ok, error, timeout, crashed or run-failed",
    "probe_steps": "probe training steps the diagnosis used",
    "seconds": "wall time of the diagnosis (a measurement, not a score)",
}
SORT = ["suite", "task", "grid", "every", "prefix", "condition", "seed", "base"]


def header_path(folder: Path, name: str) -> Path:
    """The header of ``name``'s result file under ``folder``."""
    return folder / f"{name}.json"


@dataclass(frozen=True, eq=False)
class ResultFile:
    """A diagnoser's answers on the board, with what they were made with."""

    diagnoser: str  # its name
    source: str  # how it is loaded: a registered name or module:Class
    code: str  # the hash of its code (and of faultbench's, which builds each run)
    contract: dict[str, Any]  # what it declares (Contract.to_dict)
    board: dict[str, Any]  # what it was scored on (Board.to_dict)
    timeout: float  # seconds one diagnosis could take
    date: str  # when it was scored (UTC, ISO 8601)
    software: dict[str, str]  # python, torch, platform, faultbench
    seconds: float  # wall time of the `faultbench score` that wrote it (a measurement)
    answers: pd.DataFrame = field(repr=False)  # one row per answer, in COLUMNS
    path: Path | None = None  # where it was read from
    # Every answer that does not depend on the clock whole (evidence, confidence, the run's
    # attempt), for <name>.answers.parquet: where a fresh clone finds them (None: not kept).
    outcomes: list[dict[str, Any]] | None = field(default=None, repr=False)

    def header(self) -> dict[str, Any]:
        """The JSON header, without its checksum."""
        return {
            "schema": SCHEMA,
            "kind": KIND,
            "diagnoser": self.diagnoser,
            "source": self.source,
            "code": self.code,
            "contract": self.contract,
            "board": self.board,
            "timeout": self.timeout,
            "date": self.date,
            "software": self.software,
            "seconds": round(self.seconds, 1),
            "answers": {"file": f"{self.diagnoser}.csv", "rows": len(self.answers)},
        }

    def csv_text(self) -> str:
        """The answers as the file holds them."""
        buffer = io.StringIO()
        self.answers.to_csv(buffer, index=False, lineterminator="\n")
        return buffer.getvalue()

    def same_answers(self, other: ResultFile) -> bool:
        """Whether ``other`` holds the same answers with the same code (seconds aside)."""
        if self.code != other.code or len(self.answers) != len(other.answers):
            return False
        kept = [c for c in COLUMNS if c != "seconds"]
        mine = self.answers[kept].astype(str).reset_index(drop=True)
        theirs = other.answers[kept].astype(str).reset_index(drop=True)
        return bool(mine.equals(theirs))


def rows_of(report: Report, task_kind: str) -> list[dict[str, Any]]:
    """The answers of one report (a task's grid, or the real-bug suite), in COLUMNS."""
    realbugs = report.grid == "realbugs"
    out = []
    for r in report.results:
        spec = r.spec
        out.append(
            {
                "key": r.key,
                "suite": "realbugs" if realbugs else "grid",
                "task": report.task,
                "task_kind": "" if realbugs else task_kind,
                "grid": report.grid,
                "every": report.every,
                "prefix": report.prefix,
                "condition": encode(spec.condition) if spec is not None else r.condition,
                "truth": r.label or label_of(r.condition),
                "variant": r.variant,
                "level": r.level,
                "seed": r.seed,
                "base": spec.design.attempt if spec is not None and spec.design else -1,
                "predicted": r.predicted,
                "also": "+".join(r.also),
                "status": r.status,
                "probe_steps": r.probe_steps,
                "seconds": round(r.diagnose_seconds, 4),
            }
        )
    return out


def answers_frame(rows: Sequence[dict[str, Any]]) -> pd.DataFrame:
    """Rows in COLUMNS, sorted as the file keeps them."""
    frame = pd.DataFrame(list(rows), columns=list(COLUMNS))
    return frame.sort_values(SORT, kind="stable").reset_index(drop=True)


def encode(condition: Condition) -> str:
    """``fault[.variant]@severity`` joined by ``+`` (the severity exactly, as repr writes a
    float), or ``healthy``: read back by :func:`decode`."""
    parts = [name if sev is None else f"{name}@{sev!r}" for name, sev in condition.faults]
    return "+".join(parts) or "healthy"


def decode(text: str) -> Condition:
    """Inverse of :func:`encode`."""
    if text == "healthy":
        return Condition()
    faults = []
    for part in text.split("+"):
        name, at, sev = part.partition("@")
        faults.append((name, float(sev) if at else None))
    return Condition(tuple(faults))


def write(result: ResultFile, folder: Path) -> list[Path]:
    """Write ``result``'s header and answers under ``folder``, each atomically.

    A file whose answers and code are unchanged (seconds aside) is left as it was, with
    its date and seconds: a rerun that diagnosed nothing new changes nothing.

    Returns:
        The two paths (written or kept).
    """
    head, answers = header_path(folder, result.diagnoser), folder / f"{result.diagnoser}.csv"
    kept = _write_outcomes(result, folder)
    try:
        if read(head).same_answers(result):
            return [head, answers, *kept]
    except FaultbenchError:  # none yet, or one to replace
        pass
    text = result.csv_text()
    header = result.header()
    header["checksum"] = _checksum(header, text)
    write_atomic(answers, text)
    write_atomic(head, json.dumps(header, indent=1, sort_keys=True) + "\n")
    return [head, answers, *kept]


def _write_outcomes(result: ResultFile, folder: Path) -> list[Path]:
    """``<name>.answers.parquet``: the answers whole, sorted (the same answers, the same
    bytes), left as it is when they are."""
    if result.outcomes is None:
        return []
    path = folder / f"{result.diagnoser}{answer_tables.SUFFIX}"
    rows = sorted(result.outcomes, key=lambda r: (r["key"], r["attempt"], r["every"], r["prefix"]))
    try:
        if answer_tables.read_rows(path) == rows:
            return [path]
    except (OSError, ValueError):
        pass
    return [answer_tables.export(rows, path)]


def read(path: Path) -> ResultFile:
    """Read and check one result file (its header's path).

    Raises:
        FaultbenchError: a missing, unreadable, old, truncated or hand-edited file: one
            line with its path and the fix.
    """
    fix = f"score it again: faultbench score --diagnoser {path.stem}"
    try:
        header = json.loads(path.read_text())
        text = (path.parent / header["answers"]["file"]).read_text()
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise FaultbenchError(f"result file '{path}' cannot be read ({exc}); {fix}") from None
    if not isinstance(header, dict) or header.get("kind") != KIND:
        raise FaultbenchError(f"'{path}' is not a faultbench result file; {fix}")
    if header.get("schema") != SCHEMA:
        raise FaultbenchError(
            f"result file '{path}' is stored in schema {header.get('schema')!r}, expected "
            f"{SCHEMA} (an older faultbench wrote it); {fix}"
        )
    stated = header.pop("checksum", None)
    if stated != _checksum(header, text):
        raise FaultbenchError(
            f"result file '{path}' does not match its checksum: truncated or edited by hand "
            f"(it and its .csv are written only by faultbench score); {fix}"
        )
    answers = pd.read_csv(io.StringIO(text), dtype=str, keep_default_na=False)
    if list(answers.columns) != list(COLUMNS) or len(answers) != header["answers"]["rows"]:
        raise FaultbenchError(f"result file '{path}' has other columns than {SCHEMA}'s; {fix}")
    for column in ("every", "seed", "base", "probe_steps"):
        answers[column] = answers[column].astype(int)
    for column in ("prefix", "seconds"):
        answers[column] = answers[column].astype(float)
    return ResultFile(
        diagnoser=header["diagnoser"],
        source=header["source"],
        code=header["code"],
        contract=header["contract"],
        board=header["board"],
        timeout=float(header["timeout"]),
        date=header["date"],
        software=header["software"],
        seconds=float(header["seconds"]),
        answers=answers,
        path=path,
    )


def read_all(folder: Path) -> list[ResultFile]:
    """Every result file under ``folder``, by name (each checked by :func:`read`)."""
    return [read(path) for path in sorted(folder.glob("*.json"))]


def _checksum(header: dict[str, Any], text: str) -> str:
    """SHA-256 of the header (without its checksum) and the answers' text."""
    canonical = json.dumps(header, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return hashlib.sha256(f"{canonical}\0{text}".encode()).hexdigest()
