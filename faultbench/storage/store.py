"""Where run records live: one directory per spec, one file per attempt.

Layout (browsable, and stale code versions sit next to current ones)::

    <root>/<task>/<condition>/seed-<n>/<key>/<attempt>.json

Files are written to a temporary ``.part`` name and hard-linked into place,
so a crash leaves either a whole record or none (a stray ``.part`` file is
never read); an attempt file is never overwritten, and a failed attempt keeps
its file next to the later one that succeeded.
"""

from __future__ import annotations

import os
import secrets
import socket
import tempfile
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

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
    """

    def __init__(self, root: str | os.PathLike[str] | None = None) -> None:
        self.root = Path(root) if root is not None else default_root()
        self.notes: list[str] = []  # problems met while reading, for the user to see

    def spec_dir(self, spec: RunSpec) -> Path:
        """The directory holding every code version's attempts at ``spec``."""
        return self.root / _safe(spec.task) / _safe(spec.slug) / f"seed-{spec.seed}"

    def attempts(self, spec: RunSpec) -> list[Path]:
        """Attempt files for the current code version of ``spec``, oldest first."""
        return sorted((self.spec_dir(spec) / spec.key()).glob("*.json"))

    def load(self, spec: RunSpec) -> RunRecord | None:
        """The newest valid successful attempt at ``spec``, or None.

        Unreadable, truncated, old-schema or misplaced files are skipped and
        noted with their path; failed attempts are kept but not used; records
        of other code versions are noted as stale. None means "train again".
        """
        found: RunRecord | None = None
        broken = failed = 0
        for path in self.attempts(spec):
            record = self._read(path, spec)
            if record is None:
                broken += 1
            elif record.ok:
                found = record
            else:
                failed += 1
        if found is None:
            where = f"{spec.task}/{spec.slug}/seed-{spec.seed}"
            if broken:
                self.notes.append(f"{where}: no usable record ({broken} broken); trained again")
            if failed:
                self.notes.append(
                    f"{where}: {failed} earlier attempt(s) failed (kept); trained again"
                )
            self._note_stale(spec)
        return found

    def _read(self, path: Path, spec: RunSpec | None = None) -> RunRecord | None:
        try:
            record = RunRecord.from_dict(loads(path.read_bytes()))
            if spec is not None and (record.spec != spec or record.key != spec.key()):
                raise BrokenRecord(f"holds {record.spec.slug} seed {record.spec.seed}, misplaced")
        except (OSError, ValueError, TypeError, RecursionError) as exc:
            # ValueError covers bad JSON, bad UTF-8 and BrokenRecord; the file is
            # kept for inspection and never used.
            self.notes.append(f"ignored broken record {path}: {exc}")
            return None
        return record

    def _note_stale(self, spec: RunSpec) -> None:
        current = spec.key()
        stale = [p for p in self.spec_dir(spec).glob("*/") if p.name != current]
        if stale:
            self.notes.append(
                f"{spec.task}/{spec.slug}/seed-{spec.seed}: {len(stale)} stored version(s) made "
                "by other code (loop, fault or task changed); trained again"
            )

    def save(self, record: RunRecord) -> Path:
        """Write ``record`` as a new attempt file, atomically; return its path."""
        record = replace(
            record,
            attempt=record.attempt or new_attempt_id(),
            created=record.created or datetime.now(UTC).isoformat(timespec="seconds"),
            host=record.host or socket.gethostname(),
        )
        folder = self.spec_dir(record.spec) / record.key
        folder.mkdir(parents=True, exist_ok=True)
        target = folder / f"{record.attempt}.json"
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-", suffix=".part")
        try:
            with os.fdopen(fd, "w") as fh:
                fh.write(dumps(record.to_dict()))
                fh.flush()
                os.fsync(fh.fileno())
            os.link(tmp, target)  # fails rather than overwrite an existing attempt
        finally:
            os.unlink(tmp)
        _fsync_dir(folder)  # the new name itself survives a power cut
        return target

    def records(self) -> list[RunRecord]:
        """Every readable record in the store (all attempts, all versions)."""
        out = []
        for path in sorted(self.root.glob("*/*/seed-*/*/*.json")):  # never the .part files
            record = self._read(path)
            if record is not None:
                out.append(record)
        return out


def new_attempt_id() -> str:
    """A unique, time-ordered attempt id."""
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S%f")
    return f"{stamp}-{os.getpid()}-{secrets.token_hex(3)}"


def _fsync_dir(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:  # some platforms cannot open a directory; the data is synced anyway
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_.@+" else "_" for c in name)
