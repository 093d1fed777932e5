"""Stored diagnoses: a shipped diagnoser's answer on a stored run, kept beside the run.

Diagnosing is most of a report's time (a probe trains, a tool replays the
loop), and a shipped diagnoser is deterministic: the same code on the same
record gives the same answer. So its answer is stored under a key made of the
diagnoser's name, the code it ran (:func:`diagnosis_code`: every module of
faultbench, its data sets and its diagnosers except those that only show or
score answers, and the versions of the libraries they call)
and the record's attempt id, and a later report reads it back instead of
diagnosing again. A change to any of that code gives a new key, so a stale
answer is never read; the files are hashed as code
(:func:`~faultbench.core.codetext.code_text`), so a docstring or comment edit
keeps every key and re-diagnoses nothing.

Only shipped diagnosers asked for by their registered name are stored: a
diagnoser object or a ``module:Class`` may hold state or code no key can see.
Only answers that do not depend on the clock are stored (``ok`` and
``error``); a timeout or a crash is diagnosed again next time. The seconds an
answer took are the ones measured when it ran, a wall-clock measurement like
every other.

Layout, beside the record's attempts (which the store's globs never descend into)::

    <run key folder>/diagnoses/<diagnoser>/<code>-<attempt>-every<k>[-prefix<p>].json

(``k``: the sampling the trace was read at, ``p``: the share of the run it was cut at,
below 1; :func:`faultbench.scoring.harness.run_for`).

Files are written whole or not at all (a temporary name, then a rename); a
store that cannot be written (read-only) is read from and nothing is stored.
"""

from __future__ import annotations

import hashlib
import importlib
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from functools import cache
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

from faultbench.core.codetext import code_text
from faultbench.scoring.harness import Outcome
from faultbench.storage.files import write_atomic
from faultbench.storage.records import RunRecord, RunSpec, dumps, loads
from faultbench.storage.store import Store

STORED_STATUSES = ("ok", "error")  # outcomes that do not depend on the clock
#: Libraries a shipped diagnoser's answer depends on, by distribution name.
LIBRARIES = (
    "torch",
    "numpy",
    "scipy",
    "scikit-learn",
    "pandas",
    "backpack-for-pytorch",
    "cockpit-for-pytorch",
    "weightwatcher",
    "torch-lr-finder",
)
#: The packages a diagnosis runs through: the library, its data sets and its diagnosers
#: (the last two are installed from their own folders, datasets/ and diagnosers/).
SOURCES = ("faultbench", "faultbench.datasets", "faultbench.diagnosers")
#: Parts of the package no diagnosis runs through: what is shown, and what is computed
#: from the answers afterwards (scores, summaries, whether a fault showed, this store);
#: which runs a grid or a calibration asks for (each answer is stored per run, under the
#: run's own key), where records are kept on disk (a record's content is keyed by the run
#: key, which hashes the code that trains it), and the tools beside the benchmark (the
#: doctor, preflight, calibration, ``faultbench bench``), which no diagnoser imports; and
#: the real-bug cases, whose code keys their own records (a change gives new records).
NOT_DIAGNOSIS = (
    "cli",
    "realbugs",
    "reporting",
    "tools",
    "faults/grid.py",
    "faults/levels.py",
    "storage/store.py",
    "scoring/scores.py",
    "scoring/summary.py",
    "scoring/manifest.py",
    "scoring/cache.py",
)


def source_files() -> dict[str, Path]:
    """Every source file a diagnosis can run through, by its module path
    (``faultbench.diagnosers/rules.py``), from where the packages were imported."""
    files: dict[str, Path] = {}
    for name in SOURCES:
        for folder in importlib.import_module(name).__path__:
            root = Path(folder).resolve()
            for path in root.rglob("*.py"):
                relative = path.relative_to(root)
                if name == "faultbench" and (
                    relative.parts[0] in NOT_DIAGNOSIS
                    or relative.as_posix() in NOT_DIAGNOSIS
                    or f"{name}.{relative.parts[0]}" in SOURCES
                ):
                    continue  # not a diagnosis's, or hashed as its own package
                files.setdefault(f"{name}/{relative.as_posix()}", path.resolve())
    return dict(sorted(files.items()))


@cache
def diagnosis_code() -> str:
    """Hash of :func:`source_files` (as code: without docstrings and comments) and of
    the versions of ``LIBRARIES``: what a shipped diagnoser's answer can depend on."""
    digest = hashlib.sha256()
    for relative, path in source_files().items():
        code = code_text(path.read_text(encoding="utf-8"))
        digest.update(f"{relative}\0{code}\0".encode())
    for name in LIBRARIES:
        try:
            version = metadata.version(name)
        except metadata.PackageNotFoundError:
            version = "absent"
        digest.update(f"{name}=={version}\0".encode())
    return digest.hexdigest()[:12]


@dataclass(frozen=True)
class DiagnosisCache:
    """Where one diagnoser's stored answers are read and written."""

    store: Store
    diagnoser: str  # the registered name
    code: str  # diagnosis_code()
    every: int  # the sampling the traces were read at
    prefix: float = 1.0  # the share of each run's steps it was cut at (1.0: whole)

    def path(self, record: RunRecord) -> Path:
        """The file that holds (or would hold) the answer on ``record``."""
        folder = self.store.spec_dir(record.spec) / record.key / "diagnoses" / self.diagnoser
        cut = "" if self.prefix == 1.0 else f"-prefix{self.prefix:g}"
        return folder / f"{self.code}-{record.attempt}-every{self.every}{cut}.json"

    def load(self, record: RunRecord) -> Outcome | None:
        """The stored answer on ``record``, or None (none stored, or unreadable)."""
        path = self.path(record)
        try:
            stat = path.stat()
            seen = (path, stat.st_size, stat.st_mtime_ns)
            if seen not in _READ:
                data = loads(path.read_text())
                _READ[seen] = Outcome(**{**data, "also": tuple(data["also"])})
        except (OSError, ValueError, TypeError, KeyError):
            return None
        return _READ[seen]

    def answers_all(self, specs: Iterable[RunSpec]) -> bool:
        """Whether every run of ``specs`` is stored and has a stored answer: then asking
        for them diagnoses nothing, so nothing needs preparing (a learned diagnoser's fit)
        or starting (a worker process)."""
        for spec in specs:
            record = self.store.load(spec, note=False, copy=False)
            if record is None or self.load(record) is None:
                return False
        return True

    def save(self, record: RunRecord, outcome: Outcome) -> None:
        """Store ``outcome`` if it does not depend on the clock and the store can be written."""
        if outcome.status not in STORED_STATUSES or not record.attempt:
            return
        try:  # a read-only store: answers are simply not kept
            write_atomic(self.path(record), dumps(_plain(asdict(outcome))))
        except OSError:
            return


#: Answers read in this process, by file (path, size, change time): a report asks for
#: each one twice (is everything answered, then the answer).
_READ: dict[tuple[Path, int, int], Outcome] = {}


def _plain(obj: Any) -> Any:
    """``obj`` with numpy values as Python ones and anything else JSON cannot hold as text."""
    if isinstance(obj, dict):
        return {str(k): _plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_plain(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return _plain(obj.tolist())
    if isinstance(obj, np.generic):
        return obj.item()
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    return repr(obj)
