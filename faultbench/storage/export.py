"""Writing the runs dataset (:mod:`faultbench.storage.dataset` reads it): a store's runs as
two Parquet tables a task per partition, and the manifest that names every file.

The values are the trace's own float64s (the wall-clock series as whole microseconds), so a
run read back is the same bits as the record it was exported from; files are written with
fixed settings and rows in key order, so a task's files change only when its runs do.
"""

from __future__ import annotations

import hashlib
import json
import math
import shutil
import tempfile
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from faultbench.core.errors import FaultbenchError
from faultbench.storage.dataset import (
    FORMAT,
    MANIFEST,
    MARKS,
    MICROSECONDS,
    PER_LAYER_SCALARS,
    REBUILD,
    TIERS,
    Manifest,
)
from faultbench.storage.files import write_atomic
from faultbench.storage.records import RunRecord, RunSpec, code_version, dumps
from faultbench.training.trace import SERIES_BY_NAME, Trace


def export(
    records: Iterable[RunRecord],
    out: Path,
    *,
    tier: str = "lite",
    tasks: Sequence[str] = (),
    made: dict[str, str] | None = None,
) -> Manifest:
    """Write ``records`` (one per run key) as a dataset in ``out``, a partition per task.

    A partition whose content is unchanged keeps its bytes (Parquet written with fixed
    settings and rows in key order), so a task's files change only when its runs do.
    The manifest is written last, so a folder with a manifest is whole.

    Args:
        records: Successful or failed runs; the newest attempt per key is kept.
        out: The dataset folder (created; its partitions are replaced).
        tier: "lite" (traces at every=20, no instruments' records) or "full".
        tasks: Keep only these tasks (empty: all).
        made: Where the runs were trained, for the manifest (the caller knows the
            processor: :func:`faultbench.reporting.provenance.processor_vendor`).

    Raises:
        FaultbenchError: an unknown tier, or no run to export.
    """
    if tier not in TIERS:
        raise FaultbenchError(f"unknown tier {tier!r}; expected one of {sorted(TIERS)}")
    by_key: dict[str, RunRecord] = {}
    for record in records:
        if tasks and record.spec.task not in tasks:
            continue
        held = by_key.get(record.key)
        # A success beats a failure; among equals the newest attempt wins.
        if held is None or (record.ok, record.attempt) > (held.ok, held.attempt):
            by_key[record.key] = record
    if not by_key:
        raise FaultbenchError(
            f"no run to export{' for ' + ', '.join(tasks) if tasks else ''}; expected a "
            "store holding the board's runs (make runs, or faultbench report, trains them)"
        )
    by_task: dict[str, list[RunRecord]] = {}
    for key in sorted(by_key):
        by_task.setdefault(by_key[key].spec.task, []).append(by_key[key])
    # Written beside ``out``, then put in its place: a reader sees the old dataset or the
    # new one, never a mix, and an interrupted export leaves the old one as it was.
    out.parent.mkdir(parents=True, exist_ok=True)
    building = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}-"))
    building.chmod(0o755)  # mkdtemp's folder is private; a dataset is for everyone to read
    try:
        files: dict[str, dict[str, Any]] = {}
        for task, group in sorted(by_task.items()):
            files |= _write_partition(building, task, group, TIERS[tier], full=tier == "full")
        unchanged = _unchanged(out, files, tier)
        if unchanged is not None:  # the same runs: the folder, its manifest's date included
            return unchanged
        made = {"when": datetime.now(UTC).isoformat(timespec="seconds"), **(made or {})}
        manifest = Manifest(FORMAT, tier, TIERS[tier], code_version(), files, made)
        text = json.dumps(manifest.to_dict(), indent=1, sort_keys=True) + "\n"
        write_atomic(building / MANIFEST, text).chmod(0o644)
        _replace_folder(building, out)
    finally:
        shutil.rmtree(building, ignore_errors=True)
    return manifest


def _unchanged(out: Path, files: dict[str, dict[str, Any]], tier: str) -> Manifest | None:
    """The manifest of ``out`` if it already holds exactly ``files``, made by this code."""
    try:
        held = Manifest.read(out)
    except FaultbenchError:
        return None
    same = held.files == files and held.tier == tier and held.training_code == code_version()
    return held if same else None


def _replace_folder(new: Path, out: Path) -> None:
    old = out.with_name(f".{out.name}-old")
    shutil.rmtree(old, ignore_errors=True)
    if out.exists():
        out.rename(old)
    new.rename(out)
    shutil.rmtree(old, ignore_errors=True)


def _write_partition(
    out: Path, task: str, records: list[RunRecord], every: int, *, full: bool
) -> dict[str, dict[str, Any]]:
    import pyarrow as pa

    run_rows = [_run_row(r, every, full=full) for r in records]
    trace_rows = [row for r in records if r.trace is not None for row in _trace_rows(r, every)]
    tables = {
        "runs": pa.Table.from_pylist(run_rows, schema=RUNS_SCHEMA()),
        "traces": pa.Table.from_pylist(trace_rows, schema=TRACES_SCHEMA()),
    }
    files = {}
    for name, table in tables.items():
        relative = f"{name}/task={task}/part-0.parquet"
        data = _parquet_bytes(table)
        write_atomic(out / relative, data).chmod(0o644)
        files[relative] = {
            "sha256": hashlib.sha256(data).hexdigest(),
            "rows": table.num_rows,
            "runs": len(records),
            "task": task,
        }
    return files


def _parquet_bytes(table: Any) -> bytes:
    import pyarrow as pa
    import pyarrow.parquet as pq

    sink = pa.BufferOutputStream()
    pq.write_table(
        table,
        sink,
        compression="zstd",
        compression_level=19,  # written once, read often: 4% smaller than level 9
        use_dictionary=["key", "series", "name", "kind", "status", "optimizer"],
        # Floats with their bytes split by position: 6% smaller (a float32's zero bytes).
        use_byte_stream_split=[
            path for path, kind in _leaves(table.schema) if pa.types.is_floating(kind)
        ],
        write_statistics=False,
        store_schema=True,
        row_group_size=1 << 20,
    )
    return bytes(sink.getvalue().to_pybytes())


def _leaves(schema: Any) -> list[tuple[str, Any]]:
    """Each column's leaf path as Parquet names it (a list's values: ``values.list.element``)
    and its type."""
    import pyarrow as pa

    out = []
    for field in schema:
        kind = field.type
        if pa.types.is_list(kind):
            out.append((f"{field.name}.list.element", kind.value_type))
        else:
            out.append((field.name, kind))
    return out


def RUNS_SCHEMA() -> Any:
    """The runs table's columns (docs/runs.md documents each)."""
    import pyarrow as pa

    return pa.schema(
        [
            ("key", pa.string()),
            ("suite", pa.string()),
            ("kind", pa.string()),
            ("condition", pa.string()),
            ("fault", pa.string()),
            ("variant", pa.string()),
            ("severity", pa.float64()),
            ("level", pa.string()),
            ("seed", pa.int64()),
            ("design", pa.string()),
            ("status", pa.string()),
            ("error", pa.string()),
            ("seconds", pa.float64()),
            ("steps", pa.int64()),
            ("optimizer", pa.string()),
            ("lr", pa.float64()),
            ("batch_size", pa.int64()),
            ("config", pa.string()),
            ("spec", pa.string()),
            ("marks", pa.string()),
            ("instruments", pa.string()),
            ("attempt", pa.string()),
            ("created", pa.string()),
            ("host", pa.string()),
            ("code_version", pa.string()),
        ]
    )


def TRACES_SCHEMA() -> Any:
    """The traces table's columns (docs/runs.md)."""
    import pyarrow as pa

    return pa.schema(
        [
            ("key", pa.string()),
            ("series", pa.string()),
            ("name", pa.string()),
            ("values", pa.list_(pa.float64())),
        ]
    )


def _run_row(record: RunRecord, every: int, *, full: bool) -> dict[str, Any]:
    spec, config = record.spec, record.config
    faults = spec.condition.faults
    trace = _kept_trace(record, every)
    return {
        "key": record.key,
        "suite": "realbugs" if spec.code else "grid",
        "kind": config.kind if config else "",
        "condition": spec.slug,
        "fault": "+".join(name.split(".")[0] for name, _ in faults) or "healthy",
        "variant": "+".join(name for name, _ in faults) or "healthy",
        "severity": faults[0][1] if len(faults) == 1 and faults[0][1] is not None else math.nan,
        "level": _level(spec),
        "seed": spec.seed,
        "design": json.dumps(spec.design.to_dict(), sort_keys=True) if spec.design else "",
        "status": record.status,
        "error": record.error,
        "seconds": record.seconds,
        "steps": config.steps if config else 0,
        "optimizer": config.optimizer if config else "",
        "lr": config.lr if config else math.nan,
        "batch_size": config.batch_size if config else 0,
        "config": dumps(config.to_dict()) if config else "",
        "spec": dumps(spec.to_dict()),
        "marks": dumps({name: getattr(trace, name) for name in MARKS}) if trace else "",
        "instruments": dumps(record.instruments) if full and record.instruments else "",
        "attempt": record.attempt,
        "created": record.created,
        "host": record.host,
        "code_version": record.code_version,
    }


def _level(spec: RunSpec) -> str:
    """The grid's name for the run's severity: canonical on the reference recipe (the
    classic grid), the calibrated level's on a drawn base (the full grid), else ""."""
    faults = spec.condition.faults
    if spec.code or len(faults) != 1:
        return ""
    if spec.design is None:
        return "canonical"
    from faultbench.faults.levels import levels_for

    name, severity = faults[0]
    for level, value in levels_for(spec.task, name).items():
        if severity is not None and math.isclose(value, severity):
            return level
    return "fixed" if severity is None else ""


def _kept_trace(record: RunRecord, every: int) -> Trace | None:
    if record.trace is None:
        return None
    return record.trace if every == 1 else record.trace.sampled(every)


def _trace_rows(record: RunRecord, every: int) -> list[dict[str, Any]]:
    trace = _kept_trace(record, every)
    assert trace is not None
    rows = []
    data = trace.to_dict()
    for series, value in data.items():
        if series in MARKS:
            continue
        if series in MICROSECONDS:
            rows.append(_row(record.key, MICROSECONDS[series], "", _microseconds(record, value)))
        elif isinstance(value, list):
            rows.append(_row(record.key, series, "", value))
        elif series in SERIES_BY_NAME or series == "metrics":
            rows += [_row(record.key, series, name, v) for name, v in value.items()]
        elif series in PER_LAYER_SCALARS:
            rows += [_row(record.key, series, name, [v]) for name, v in value.items()]
        else:  # a field this exporter does not know: refuse rather than drop it silently
            raise FaultbenchError(f"trace field {series!r} has no column in the runs dataset")
    return rows


def _microseconds(record: RunRecord, seconds: list[float]) -> list[float]:
    import numpy as np

    counts = np.rint(np.asarray(seconds, dtype=np.float64) * 1e6)
    if not np.array_equal(counts / 1e6, np.asarray(seconds, dtype=np.float64), equal_nan=True):
        raise FaultbenchError(
            f"run {record.key} ({record.spec.task}/{record.spec.slug}) has timings finer than "
            "the microsecond, which the dataset would not keep exactly; expected a run "
            f"trained by the installed code; {REBUILD}"
        )
    return counts.tolist()


def _row(key: str, series: str, name: str, values: Sequence[Any]) -> dict[str, Any]:
    return {"key": key, "series": series, "name": name, "values": [float(v) for v in values]}
