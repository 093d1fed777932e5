"""A diagnoser's stored answers as Parquet: one table per diagnoser and code.

Each process appends what it diagnoses to a buffer and writes it as a segment file of
its own, atomically (every :data:`FLUSH_EVERY` answers, at the end of an evaluation and
at exit), so processes that diagnose side by side (a report's workers) never write one
file twice; a reader reads every segment. :func:`compact` folds the segments into one
file (``make report`` does at its end). Layout in the store::

    <root>/answers/<diagnoser>/<code>/<segment>.parquet

The same table, exported beside the result file (``results/diagnosers/<name>.answers
.parquet``, :func:`export`), is where a fresh clone finds the answers that were made on
the shipped runs dataset's runs: a run's answer is read there when its attempt is the
one the answer was made on.
"""

from __future__ import annotations

import atexit
import json
import math
import os
import secrets
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from faultbench.storage.files import write_atomic
from faultbench.storage.records import dumps, loads

FOLDER = "answers"  # under the store's root
SUFFIX = ".answers.parquet"  # an exported table: results/diagnosers/<name>.answers.parquet
FLUSH_EVERY = 500  # answers buffered before a segment is written
#: The columns, with what each holds (docs/runs.md's answers section shows them).
COLUMNS = {
    "key": "the run's key",
    "attempt": "the attempt of the run the answer was made on",
    "every": "the sampling its trace was read at",
    "prefix": "the share of its steps read (1.0: whole)",
    "status": "ok or error (answers that depend on the clock are not kept)",
    "label": "the answer",
    "confidence": "the diagnoser's confidence (NaN: none given)",
    "also": "further labels, JSON list",
    "evidence": "the diagnoser's numbers, JSON",
    "message": "what went wrong, where status is error",
    "probe_steps": "probe training steps the diagnosis used",
    "seconds": "wall time of the diagnosis (a measurement)",
    "code": "the hash of the code the answer was made with",
}
Index = tuple[str, str, int, float]  # key, attempt, every, prefix


@dataclass
class AnswerTable:
    """One diagnoser's answers under one code, read from its segments and written to new ones.

    Args:
        folder: ``<root>/answers/<diagnoser>/<code>``.
        code: The code hash (a shipped export holds other codes' rows too: skipped).
        shipped: An exported table to read first (None: none).
    """

    folder: Path
    code: str
    shipped: Path | None = None
    rows: dict[Index, dict[str, Any]] = field(default_factory=dict)
    pending: list[dict[str, Any]] = field(default_factory=list)
    _read: set[str] = field(default_factory=set)
    _attempts: dict[tuple[str, int, float], str] = field(default_factory=dict)
    _indexed: int = -1  # len(rows) when _attempts was built

    def __post_init__(self) -> None:
        if self.shipped is not None and self.shipped.exists():
            self._add(_read_table(self.shipped))
        self.refresh()

    def get(self, index: Index) -> dict[str, Any] | None:
        """The row of ``index``; the folder is listed again when it is not known yet."""
        found = self.rows.get(index)
        if found is None and self.refresh():
            found = self.rows.get(index)
        return found

    def attempt_of(self, key: str, every: int, prefix: float) -> str | None:
        """The attempt of run ``key`` that an answer was made on (at ``every``, ``prefix``),
        or None: what lets an instrumented run already answered go untraced."""
        if self._indexed != len(self.rows):  # rows were added since: index them again
            self._attempts = {(k, e, p): attempt for k, attempt, e, p in self.rows}
            self._indexed = len(self.rows)
        return self._attempts.get((key, every, prefix))

    def refresh(self) -> bool:
        """Read the segments written since the last look; whether there were any."""
        try:
            names = sorted(n for n in os.listdir(self.folder) if n.endswith(".parquet"))
        except OSError:
            return False
        new = [n for n in names if n not in self._read]
        for name in new:
            try:
                self._add(_read_table(self.folder / name))
            except (OSError, ValueError):  # a segment compacted away meanwhile
                continue
            self._read.add(name)
        return bool(new)

    def put(self, row: dict[str, Any]) -> None:
        """Keep ``row`` and buffer it for the next segment."""
        self.rows[_index(row)] = row
        self.pending.append(row)
        if len(self.pending) >= FLUSH_EVERY:
            self.flush()

    def flush(self) -> None:
        """Write the buffered rows as a new segment (nothing on a read-only store)."""
        if not self.pending:
            return
        name = f"{os.getpid()}-{secrets.token_hex(4)}.parquet"
        try:
            write_atomic(self.folder / name, _table_bytes(self.pending))
        except OSError:
            pass  # a read-only store: the answers stay in this process only
        else:
            self._read.add(name)
        self.pending = []

    def _add(self, rows: Iterable[dict[str, Any]]) -> None:
        for row in rows:
            if row["code"] == self.code:
                self.rows[_index(row)] = row


def _index(row: dict[str, Any]) -> Index:
    return (row["key"], row["attempt"], int(row["every"]), float(row["prefix"]))


def row_of(index: Index, outcome: Any, code: str) -> dict[str, Any]:
    """The row of one :class:`~faultbench.scoring.harness.Outcome`."""
    key, attempt, every, prefix = index
    return {
        "key": key,
        "attempt": attempt,
        "every": every,
        "prefix": prefix,
        "status": outcome.status,
        "label": outcome.label,
        "confidence": math.nan if outcome.confidence is None else float(outcome.confidence),
        "also": json.dumps([str(label) for label in outcome.also]),
        "evidence": dumps(plain(outcome.evidence)),
        "message": outcome.message,
        "probe_steps": int(outcome.probe_steps),
        "seconds": float(outcome.seconds),
        "code": code,
    }


def plain(obj: Any) -> Any:
    """``obj`` with numpy values as Python ones and anything else JSON cannot hold as text."""
    if isinstance(obj, dict):
        return {str(k): plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [plain(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return plain(obj.tolist())
    if isinstance(obj, np.generic):
        return obj.item()
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    return repr(obj)


def outcome_fields(row: dict[str, Any]) -> dict[str, Any]:
    """``Outcome(**outcome_fields(row))``: the row's answer as it was given."""
    confidence = row["confidence"]
    return {
        "status": row["status"],
        "label": row["label"],
        "confidence": None if confidence != confidence else confidence,  # NaN: none
        "evidence": loads(row["evidence"]),
        "message": row["message"],
        "probe_steps": int(row["probe_steps"]),
        "seconds": float(row["seconds"]),
        "also": tuple(json.loads(row["also"])),
    }


def export(rows: Iterable[dict[str, Any]], path: Path) -> Path:
    """Write ``rows`` as one table at ``path`` (sorted, so the same answers give the same
    bytes), atomically."""
    ordered = sorted(rows, key=lambda r: (_index(r), r["code"]))
    return write_atomic(path, _table_bytes(ordered))


def merge_into(path: Path, rows: Iterable[dict[str, Any]]) -> Path:
    """Export ``rows`` into the table at ``path`` beside the rows of the same code it holds
    (a row of another code is dropped: no store would read it)."""
    new = list(rows)
    codes = {row["code"] for row in new}
    try:
        held = [row for row in read_rows(path) if row["code"] in codes]
    except (OSError, ValueError):
        held = []
    merged = {(_index(row), row["code"]): row for row in [*held, *new]}
    return export(merged.values(), path)


def compact(folder: Path) -> None:
    """Fold every segment under ``folder`` (``<root>/answers``) into one per diagnoser and
    code: a store that answered a whole board in small pieces reads one file each."""
    for code_folder in sorted(folder.glob("*/*/")):
        segments = sorted(code_folder.glob("*.parquet"))
        if len(segments) < 2:
            continue
        rows: dict[tuple[Index, str], dict[str, Any]] = {}
        for segment in segments:
            rows |= {(_index(r), r["code"]): r for r in _read_table(segment)}
        name = f"{os.getpid()}-{secrets.token_hex(4)}.parquet"
        export(rows.values(), code_folder / name)
        for segment in segments:  # only those folded in; one written meanwhile stays
            segment.unlink(missing_ok=True)


def _schema() -> Any:
    import pyarrow as pa

    kinds = {"every": pa.int64(), "prefix": pa.float64(), "confidence": pa.float64()}
    kinds |= {"probe_steps": pa.int64(), "seconds": pa.float64()}
    return pa.schema([(name, kinds.get(name, pa.string())) for name in COLUMNS])


def _table_bytes(rows: list[dict[str, Any]]) -> bytes:
    import pyarrow as pa
    import pyarrow.parquet as pq

    sink = pa.BufferOutputStream()
    pq.write_table(
        pa.Table.from_pylist(rows, schema=_schema()),
        sink,
        compression="zstd",
        use_dictionary=["status", "label", "code", "attempt"],
        write_statistics=False,
    )
    return bytes(sink.getvalue().to_pybytes())


def read_rows(path: Path) -> list[dict[str, Any]]:
    """The rows of an exported table, in its order.

    Raises:
        OSError, ValueError: it is missing or unreadable.
    """
    return _read_table(path)


def _read_table(path: Path) -> list[dict[str, Any]]:
    import pyarrow.parquet as pq

    try:
        return list(pq.read_table(path).to_pylist())
    except Exception as exc:  # pyarrow's errors: a broken or vanished file
        raise ValueError(f"{path}: {exc}") from None


#: Every table this process opened, by folder: a report asks for each answer twice
#: (is everything answered, then the answer), and every buffer is flushed at exit.
TABLES: dict[tuple[Path, str], AnswerTable] = {}


def table(folder: Path, code: str, shipped: Path | None) -> AnswerTable:
    """The answer table of ``folder`` under ``code``, opened once per process."""
    known = TABLES.get((folder, code))
    if known is None:
        known = TABLES[folder, code] = AnswerTable(folder, code, shipped)
    return known


def flush_all() -> None:
    """Write every buffered answer of this process (an evaluation's end, and at exit)."""
    for answers in TABLES.values():
        answers.flush()


atexit.register(flush_all)
