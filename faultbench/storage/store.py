"""Where run records live: one directory per spec, one file per attempt.

Layout (browsable, and stale code versions sit next to current ones)::

    <root>/<task>/<condition>/seed-<n>/<key>/<attempt>.json

Files are written whole or not at all (:func:`faultbench.storage.files.write_atomic`;
a stray ``.part`` file is never read); an attempt file is never overwritten, and a
failed attempt keeps its file next to the later one that succeeded.

A store can stand on a runs dataset (:mod:`faultbench.storage.dataset`: the board's runs as
Parquet, shipped in ``results/runs/``): a run it holds under the run's current key is read
from there and never trained again, unless this store holds the very attempt it was
exported from (the same bits, with every step where the dataset keeps every 20th).

Several processes may share one store: whoever trains a run holds its key's
lock file (``<key>/.lock``, an ``fcntl.flock``) while training and writing it,
and anyone who waited for that lock reads the store again before training, so
two processes never both train the same run. Reading needs no lock and no
write access: a read-only store that holds every run it is asked for works.
"""

from __future__ import annotations

import errno
import fcntl
import os
import secrets
import socket
import tempfile
from copy import deepcopy
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

from faultbench.core.errors import FaultbenchError
from faultbench.storage.dataset import RunsDataset, open_runs
from faultbench.storage.files import write_atomic
from faultbench.storage.records import BrokenRecord, RunRecord, RunSpec, dumps, loads

ENV_VAR = "FAULTBENCH_STORE"


def default_root() -> Path:
    """``$FAULTBENCH_STORE``, else ``~/.cache/faultbench/runs``."""
    env = os.environ.get(ENV_VAR)
    return Path(env) if env else Path.home() / ".cache" / "faultbench" / "runs"


class Store:
    """A directory of run records.

    Args:
        root: The directory; :func:`default_root` when omitted.
        runs: The runs dataset it stands on: a folder, an open one, None for none, or
            "default" (:func:`faultbench.storage.dataset.default_runs`: ``$FAULTBENCH_RUNS``,
            else the checkout's ``results/runs-full/`` or ``results/runs/``).
    """

    def __init__(
        self,
        root: str | os.PathLike[str] | None = None,
        *,
        runs: RunsDataset | str | os.PathLike[str] | None = "default",
    ) -> None:
        self.root = Path(root) if root is not None else default_root()
        self.runs = runs if isinstance(runs, RunsDataset) or runs is None else open_runs(runs)
        self._shipped: dict[RunSpec, RunRecord] = {}  # records read from the dataset
        # Specs whose dataset attempt this store has no copy of: a store's attempts are
        # trained here, never the dataset's, so one looked for once is not looked for again.
        self._no_copy: set[RunSpec] = set()
        self.notes: list[str] = []  # problems met while reading, for the user to see
        # Records already read, by file and its size and change time: a report reads
        # each run once per diagnoser, and an attempt file, once written, never changes.
        # Each caller gets its own copy, so a diagnoser that writes into a trace's
        # arrays cannot change what the next one is given.
        self._read_before: dict[tuple[Path, int, int], RunRecord] = {}
        self._keys: dict[RunSpec, str] = {}  # hashing a fault's code takes milliseconds
        # A spec's folder names its drawn base by a hash of the whole design: a warm
        # report looks a spec's folder up hundreds of thousands of times.
        self._dirs: dict[RunSpec, Path] = {}
        # The file of the good record :meth:`load` last found for each spec. A run is
        # trained again only when it has no good record, so while that file is as it was
        # (its record still in ``_read_before``), no listing of the folder can find another
        # answer; a report loads each run once per evaluation (~300,000 times, ~3,300 runs).
        self._found: dict[RunSpec, Path] = {}

    @property
    def every_step(self) -> bool:
        """Whether its runs can be read at every step: a lite runs dataset keeps every 20th
        step's statistics (a store alone, or the full tier, keeps them all)."""
        return self.runs is None or self.runs.manifest.every == 1

    def key(self, spec: RunSpec) -> str:
        """``spec.key()``, worked out once per spec for the life of this object (the code
        it hashes does not change while a command runs)."""
        known = self._keys.get(spec)
        if known is None:
            known = self._keys[spec] = spec.key()
        return known

    def check(self) -> None:
        """Refuse a root that can never hold records: a file, or under one.

        A missing root is fine here (it is created on the first write, and
        :meth:`require_writable` checks that this works before any training).

        Raises:
            FaultbenchError: the root, or the nearest existing folder above it, is not a directory.
        """
        path = self.root
        while not path.exists() and path != path.parent:
            path = path.parent
        if not path.is_dir():
            where = "is" if path == self.root else f"is under '{path}', which is"
            raise FaultbenchError(
                f"record store '{self.root}' {where} a file, not a directory; expected a "
                "directory (or a path where one can be created), e.g. --store ./runs"
            )

    def require_writable(self) -> None:
        """Make sure a record can be written: create the root and write a scratch file.

        Called before the first run trains, so a store that cannot take its
        records fails in one line instead of after the training.

        Raises:
            FaultbenchError: the root cannot be created or written.
        """
        self.check()
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryFile(dir=self.root, prefix=".write-check-"):
                pass
        except OSError as exc:
            why = exc.strerror or type(exc).__name__
            raise FaultbenchError(
                f"record store '{self.root}' cannot take new records ({why}); expected a "
                "directory this user can create and write, or --store DIR / $FAULTBENCH_STORE "
                "pointing at one"
            ) from None

    def lock(self, spec: RunSpec) -> KeyLock:
        """The lock of ``spec``'s key (not yet acquired)."""
        return KeyLock(self.spec_dir(spec) / self.key(spec) / ".lock")

    def spec_dir(self, spec: RunSpec) -> Path:
        """The directory holding every code version's attempts at ``spec``."""
        known = self._dirs.get(spec)
        if known is None:
            known = self._dirs[spec] = self.root / _safe(spec.task) / _safe(spec.slug) / spec.folder
        return known

    def attempts(self, spec: RunSpec) -> list[Path]:
        """Attempt files for the current code version of ``spec``, oldest first."""
        folder = self.spec_dir(spec) / self.key(spec)
        try:  # a listing, not a glob: a report looks here tens of thousands of times
            names = os.listdir(folder)
        except (FileNotFoundError, NotADirectoryError):
            return []
        return [folder / name for name in sorted(names) if name.endswith(".json")]

    def load(self, spec: RunSpec, *, note: bool = True, copy: bool = True) -> RunRecord | None:
        """The newest valid successful attempt at ``spec``, or None.

        Unreadable, truncated, old-schema or misplaced files are skipped and
        noted with their path (unless ``note`` is False, for a second look at
        the same spec); failed attempts are kept but not used; records of other
        code versions are noted as stale. None means "train again". The record
        is a copy of the one kept in memory, unless ``copy`` is False: then it
        is that one, for a caller that only looks (and must not change it).
        """
        if spec in self._found:
            kept = self._kept(self._found[spec])
            if kept is not None:
                return deepcopy(kept) if copy else kept
            del self._found[spec]
        shipped = self._from_runs(spec)
        if shipped is not None:
            return deepcopy(shipped) if copy else shipped
        notes = len(self.notes)
        found: RunRecord | None = None
        found_at: Path | None = None
        broken = failed = 0
        for path in self.attempts(spec):
            record = self._read(path, spec, copy=copy)
            if record is None:
                broken += 1
            elif record.ok:
                found, found_at = record, path
            else:
                failed += 1
        if found is not None and found_at is not None and not broken:
            # Not with a broken file beside it: each load notes that file again, as before.
            self._found[spec] = found_at
        if found is None:
            where = f"{spec.task}/{spec.slug}/{spec.folder}"
            if broken:
                self.notes.append(f"{where}: no usable record ({broken} broken); trained again")
            if failed:
                self.notes.append(
                    f"{where}: {failed} earlier attempt(s) failed (kept); trained again"
                )
            self._note_stale(spec)
        if not note:
            del self.notes[notes:]
        return found

    def _from_runs(self, spec: RunSpec) -> RunRecord | None:
        """The dataset's record of ``spec``, or this store's copy of the same attempt (the
        same bits, and every step where the dataset may keep every 20th); None when the
        dataset does not hold the run under its current key."""
        if self.runs is None:
            return None
        if spec not in self._shipped:
            record = self.runs.load(spec, self.key(spec))
            if record is None:
                return None
            self._shipped[spec] = record
        record = self._shipped[spec]
        if spec in self._no_copy:
            return record
        same = self.spec_dir(spec) / record.key / f"{record.attempt}.json"
        local = self._read(same, spec, copy=False) if same.exists() else None
        if local is not None and local.ok == record.ok:
            self._found[spec] = same
            return local
        self._no_copy.add(spec)
        return record

    def _kept(self, path: Path) -> RunRecord | None:
        """The record read from ``path`` before, if the file is as it was then."""
        try:
            stat = os.stat(path)
        except OSError:
            return None
        return self._read_before.get((path, stat.st_size, stat.st_mtime_ns))

    def _read(
        self, path: Path, spec: RunSpec | None = None, *, copy: bool = True
    ) -> RunRecord | None:
        try:
            stat = path.stat()
            seen = (path, stat.st_size, stat.st_mtime_ns)
            known = self._read_before.get(seen)
            record = RunRecord.from_dict(loads(path.read_bytes())) if known is None else known
            if spec is not None and (record.spec != spec or record.key != self.key(spec)):
                raise BrokenRecord(f"holds {record.spec.slug} seed {record.spec.seed}, misplaced")
        except (OSError, ValueError, TypeError, RecursionError) as exc:
            # ValueError covers bad JSON, bad UTF-8 and BrokenRecord; the file is
            # kept for inspection and never used.
            self.notes.append(f"ignored broken record {path}: {exc}")
            return None
        self._read_before[seen] = record
        return deepcopy(record) if copy else record

    def _note_stale(self, spec: RunSpec) -> None:
        current = self.key(spec)
        stale = [p for p in self.spec_dir(spec).glob("*/") if p.name != current]
        if stale:
            self.notes.append(
                f"{spec.task}/{spec.slug}/{spec.folder}: {len(stale)} stored version(s) made "
                "by other code (loop, fault or task changed); trained again"
            )

    def save(self, record: RunRecord) -> Path:
        """Write ``record`` as a new attempt file, atomically; return its path.

        A record not yet :func:`stamped` is stamped first.
        """
        record = stamped(record)
        self._found.pop(record.spec, None)  # the next load lists the folder again
        target = self.spec_dir(record.spec) / record.key / f"{record.attempt}.json"
        return write_atomic(target, dumps(record.to_dict()), exclusive=True)

    def records(self) -> list[RunRecord]:
        """Every readable record in the store (all attempts, all versions)."""
        out = []
        for path in sorted(self.root.glob("*/*/seed-*/*/*.json")):  # never the .part files
            record = self._read(path)
            if record is not None:
                out.append(record)
        return out


class KeyLock:
    """An exclusive ``flock`` on one key's lock file, shared by every process on the store.

    Args:
        path: The lock file; it and its folder are created on first acquire.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None

    def acquire(self, *, blocking: bool = True) -> bool:
        """Take the lock; without ``blocking``, return False at once if another process holds it."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
        except OSError as exc:
            os.close(fd)
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                return False
            raise
        self._fd = fd
        return True

    def release(self) -> None:
        """Let the next process in (closing the file releases the flock)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def stamped(record: RunRecord) -> RunRecord:
    """``record`` with its attempt id, creation time and host filled in where empty:
    what :meth:`Store.save` writes, and what the caller should go on with (a stored
    diagnosis names the attempt it was made on)."""
    return replace(
        record,
        attempt=record.attempt or new_attempt_id(),
        created=record.created or datetime.now(UTC).isoformat(timespec="seconds"),
        host=record.host or socket.gethostname(),
    )


def new_attempt_id() -> str:
    """A unique, time-ordered attempt id."""
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S%f")
    return f"{stamp}-{os.getpid()}-{secrets.token_hex(3)}"


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_.@+" else "_" for c in name)
