"""The runs as a dataset: Parquet tables anyone can read, and the reader the store uses.

The runs of the board are the same for every diagnoser; only the diagnosis differs. So
they are data (as NAS-Bench's curves are): :func:`faultbench.storage.export.export` writes a
store's runs as two Parquet tables partitioned by task, and :class:`RunsDataset` reads them
back as the
:class:`~faultbench.storage.records.RunRecord` the store would have given, so a run found
there with its current key is never trained again (:class:`~faultbench.storage.store.Store`
asks it first). docs/runs.md is the schema page, for readers without faultbench.

Layout (hive partitions: pandas, pyarrow, DuckDB and ``datasets`` read them as they are)::

    <dir>/manifest.json                     format, tier, code hashes, each file's SHA-256
    <dir>/runs/task=<task>/part-0.parquet   one row per run: spec, config, status, seconds
    <dir>/traces/task=<task>/part-0.parquet one row per (run, series, name): its values

Two tiers: the **lite** tier (``results/runs/``, shipped) holds each trace as
``Monitor(every=20)`` records it, the sampling the headline reads; the **full** tier
holds every step and the instruments' records, and is built locally (``make runs``).
The values are the trace's own float64s, written as they are: a run read back is the
same bits as the record it was exported from (its attempt id included, so an answer
stored on that attempt is the answer on this one). The wall-clock series (data wait,
compute, training seconds) are measurements made once, on the machine that trained.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

from faultbench.core.errors import FaultbenchError
from faultbench.storage.records import RunRecord, RunSpec, code_version, loads
from faultbench.training.trace import SERIES_BY_NAME, RunConfig, Trace

FORMAT = 1  # bump when a table's layout changes; an older dataset is refused with the fix
MANIFEST = "manifest.json"
TIERS = {"lite": 20, "full": 1}  # tier -> the sampling its traces are kept at
#: Trace fields with one value per layer (or input statistic): a row each, one value long.
PER_LAYER_SCALARS = ("input_stats", "no_grad_weights", "weight_change", "weight_count")
_INTEGER_SCALARS = ("no_grad_weights", "weight_count")  # read back as int
#: The wall-clock series, kept as whole microseconds (the Monitor records them so:
#: :func:`~faultbench.training.trace.whole_microseconds`): integers compress, noise does not.
MICROSECONDS = {"wait_seconds": "wait_microseconds", "compute_seconds": "compute_microseconds"}
#: Trace fields kept as JSON in the runs table: the summaries a prefix of the run needs.
MARKS = ("at_steps", "no_grad_sampled")
REBUILD = "rebuild it with `make runs` (trains what the store lacks, then exports)"
ENV_VAR = "FAULTBENCH_RUNS"  # the runs dataset a store stands on; "none": none
NONE = "none"


@dataclass(frozen=True)
class Manifest:
    """What a dataset folder holds and what made it."""

    format: int  # FORMAT when written
    tier: str  # "lite" or "full"
    every: int  # the sampling its traces are kept at (TIERS[tier])
    training_code: str  # code_version() of the grid's runs it holds
    files: dict[str, dict[str, Any]]  # relative path -> sha256, rows, runs, task
    made: dict[str, str]  # when, host, processor, python: where the runs were exported

    @property
    def runs(self) -> int:
        """How many runs its files hold (the runs tables' rows, by the manifest)."""
        return sum(int(e["runs"]) for path, e in self.files.items() if path.startswith("runs/"))

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": self.format,
            "tier": self.tier,
            "every": self.every,
            "training_code": self.training_code,
            "made": self.made,
            "files": self.files,
        }

    @classmethod
    def read(cls, folder: Path) -> Manifest:
        """The manifest of ``folder``.

        Raises:
            FaultbenchError: it is missing, unreadable, or of another format.
        """
        path = folder / MANIFEST
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            manifest = cls(
                int(data["format"]),
                str(data["tier"]),
                int(data["every"]),
                str(data["training_code"]),
                dict(data["files"]),
                dict(data["made"]),
            )
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise FaultbenchError(
                f"runs dataset '{folder}' has no readable {MANIFEST} ({type(exc).__name__}); "
                f"expected a folder written by `faultbench runs export`; {REBUILD}"
            ) from None
        if manifest.format != FORMAT:
            raise FaultbenchError(
                f"runs dataset '{folder}' is in format {manifest.format}, expected {FORMAT}; "
                f"{REBUILD}"
            )
        return manifest


def shipped_runs(tier: str = "lite") -> Path:
    """``results/runs/`` (the full tier: ``results/runs-full/``) of the checkout faultbench is
    installed from (an editable install)."""
    results = Path(__file__).resolve().parents[2] / "results"
    return results / ("runs" if tier == "lite" else f"runs-{tier}")


def default_runs() -> Path | None:
    """The runs dataset a store stands on unless told otherwise: ``$FAULTBENCH_RUNS``
    (``none``: none), else the checkout's full tier where ``make runs`` built one (it holds
    every step), else its shipped lite tier."""
    env = os.environ.get(ENV_VAR)
    if env is not None:
        return None if env.strip().lower() in (NONE, "") else Path(env)
    found = [path for path in map(shipped_runs, ("full", "lite")) if (path / MANIFEST).exists()]
    return found[0] if found else None


_OPENED: dict[tuple[Path, int, int], RunsDataset] = {}


def open_runs(folder: str | os.PathLike[str] | None) -> RunsDataset | None:
    """The dataset in ``folder`` (``"default"``: :func:`default_runs`; None or ``"none"``:
    none), opened once per process while its manifest is unchanged: checking the files'
    hashes reads them all, and every store of a command stands on the same dataset.

    Raises:
        FaultbenchError: the folder holds no dataset, or a file does not match its manifest.
    """
    if folder is None or str(folder).strip().lower() == NONE:
        return None
    path = default_runs() if str(folder) == "default" else Path(folder)
    if path is None:
        return None
    try:
        stat = (path / MANIFEST).stat()
    except OSError:
        stat = None
    seen = (path.resolve(), stat.st_size, stat.st_mtime_ns) if stat else None
    if seen is None or seen not in _OPENED:
        dataset = RunsDataset(path)  # refuses a missing manifest in one line
        if seen is None:
            return dataset
        _OPENED[seen] = dataset
    return _OPENED[seen]


class RunsDataset:
    """A dataset folder read back as run records, by run key.

    Opening it checks every file against the manifest's SHA-256 (a file changed or cut
    short is refused, never read); tables are read a task at a time, on first use.

    Args:
        folder: The dataset's folder (holding ``manifest.json``).
    """

    def __init__(self, folder: str | Path) -> None:
        self.folder = Path(folder)
        self.manifest = Manifest.read(self.folder)
        self._check_files()
        self._tasks: dict[str, _Partition] = {}

    def __repr__(self) -> str:
        return f"RunsDataset({str(self.folder)!r}, tier={self.manifest.tier!r})"

    def _check_files(self) -> None:
        for relative, entry in sorted(self.manifest.files.items()):
            path = self.folder / relative
            try:
                found = hashlib.sha256(path.read_bytes()).hexdigest()
            except OSError as exc:
                found = f"unreadable ({exc.strerror or type(exc).__name__})"
            if found != entry["sha256"]:
                raise FaultbenchError(
                    f"runs dataset file '{path}' does not match its manifest (SHA-256 "
                    f"{found[:12]}, expected {entry['sha256'][:12]}): the {entry['runs']} runs "
                    f"of task {entry['task']} would be trained again; restore it "
                    f"(git checkout -- {path}) or {REBUILD}"
                )

    @cached_property
    def tasks(self) -> tuple[str, ...]:
        """The tasks it holds a partition of."""
        return tuple(sorted({str(e["task"]) for e in self.manifest.files.values()}))

    @property
    def runs(self) -> int:
        """How many runs it holds."""
        return self.manifest.runs

    def check_code(self) -> None:
        """Refuse a dataset made by other training code than the installed one: none of
        its grid runs would be found, and every one would be trained again.

        Raises:
            FaultbenchError: the manifest's training code is not :func:`code_version`.
        """
        if self.manifest.training_code != code_version():
            raise FaultbenchError(
                f"runs dataset '{self.folder}' was made by training code "
                f"{self.manifest.training_code}, the installed code is {code_version()}: its "
                f"{self.runs} runs would all be trained again; {REBUILD}, or pass --runs none "
                "to train into the store alone"
            )

    def keys(self, task: str) -> frozenset[str]:
        """The run keys held for ``task`` (empty for a task it has no partition of)."""
        return frozenset(self._partition(task).rows) if task in self.tasks else frozenset()

    def load(self, spec: RunSpec, key: str) -> RunRecord | None:
        """The record of ``spec`` under ``key``, or None when the dataset does not hold it."""
        if spec.task not in self.tasks:
            return None
        return self._partition(spec.task).record(key, spec)

    def records(self) -> list[RunRecord]:
        """Every record it holds, task by task, in key order."""
        out = []
        for task in self.tasks:
            part = self._partition(task)
            out += [part.record(key) for key in sorted(part.rows)]
        return [r for r in out if r is not None]

    def _partition(self, task: str) -> _Partition:
        if task not in self._tasks:
            self._tasks[task] = _Partition(self.folder, task)
        return self._tasks[task]


class _Partition:
    """One task's two tables, indexed by run key."""

    def __init__(self, folder: Path, task: str) -> None:
        import pyarrow.parquet as pq

        runs = pq.read_table(folder / f"runs/task={task}/part-0.parquet").to_pylist()
        self.rows = {row["key"]: row for row in runs}
        traces = pq.read_table(folder / f"traces/task={task}/part-0.parquet")
        keys = traces.column("key").to_pylist()
        # The values as one flat float64 array and each row's offsets into it: a run's
        # series are slices of it, with no Python list in between (2,600 runs: 5.4 s -> ~1 s).
        values = traces.column("values").combine_chunks()
        self.series = traces.column("series").to_pylist()
        self.names = traces.column("name").to_pylist()
        self.offsets = values.offsets.to_numpy()
        self.flat = values.values.to_numpy(zero_copy_only=False)
        self.spans: dict[str, tuple[int, int]] = {}
        start = 0
        for i in range(1, len(keys) + 1):  # rows are written grouped by key
            if i == len(keys) or keys[i] != keys[start]:
                self.spans[keys[start]] = (start, i)
                start = i

    def record(self, key: str, spec: RunSpec | None = None) -> RunRecord | None:
        row = self.rows.get(key)
        if row is None:
            return None
        stored = RunSpec.from_dict(loads(row["spec"]))
        if spec is not None and stored != spec:
            return None  # another spec under the same key: never handed out as this one
        return RunRecord(
            spec=stored,
            key=key,
            attempt=row["attempt"],
            status=row["status"],
            seconds=row["seconds"],
            trace=self._trace(key, row) if row["status"] == "ok" else None,
            config=RunConfig.from_dict(loads(row["config"])) if row["config"] else None,
            error=row["error"],
            code_version=row["code_version"],
            created=row["created"],
            host=row["host"],
            instruments=loads(row["instruments"]) if row["instruments"] else {},
        )

    def _trace(self, key: str, row: dict[str, Any]) -> Trace:
        start, stop = self.spans.get(key, (0, 0))
        seconds = {stored: name for name, stored in MICROSECONDS.items()}
        data: dict[str, Any] = {name: {} for name in (*SERIES_BY_NAME, "metrics")}
        data |= {name: {} for name in PER_LAYER_SCALARS}
        for i in range(start, stop):
            series, name = self.series[i], self.names[i]
            values = self.flat[self.offsets[i] : self.offsets[i + 1]].copy()
            if series in seconds:  # Trace.from_dict reads a whole-run series from a list
                data[seconds[series]] = (values / 1e6).tolist()
            elif series in PER_LAYER_SCALARS:
                value = float(values[0])
                data[series][name] = int(value) if series in _INTEGER_SCALARS else value
            elif series in data and isinstance(data[series], dict) and name:
                data[series][name] = values
            else:
                data[series] = values.tolist()
        data |= loads(row["marks"])
        return Trace.from_dict(data)
