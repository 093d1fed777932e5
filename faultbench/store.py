"""Where run records live: one directory per spec, one file per attempt.

Layout (browsable, and stale code versions sit next to current ones)::

    <root>/<task>/<condition>/seed-<n>/<key>/<attempt>.json

Files are written to a temporary name and renamed, so a crash leaves either
a whole record or none; an attempt file is never overwritten.
"""

from __future__ import annotations

import os
import secrets
import socket
import tempfile
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path

from faultbench.records import RunRecord, RunSpec, dumps, loads

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

        Unreadable, truncated or old-schema files are skipped and noted with
        their path; records of other code versions are noted as stale.
        """
        found: RunRecord | None = None
        for path in self.attempts(spec):
            record = self._read(path)
            if record is not None and record.ok:
                found = record
        if found is None:
            self._note_stale(spec)
        return found

    def _read(self, path: Path) -> RunRecord | None:
        try:
            return RunRecord.from_dict(loads(path.read_text()))
        except (OSError, ValueError, KeyError, TypeError) as exc:
            self.notes.append(f"ignored broken record {path}: {exc}; the run is trained again")
            return None

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
            created=record.created or datetime.now(timezone.utc).isoformat(timespec="seconds"),
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
        return target

    def records(self) -> list[RunRecord]:
        """Every readable record in the store (all attempts, all versions)."""
        out = []
        for path in sorted(self.root.glob("*/*/seed-*/*/*.json")):
            record = self._read(path)
            if record is not None:
                out.append(record)
        return out


def new_attempt_id() -> str:
    """A unique, time-ordered attempt id."""
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S%f")
    return f"{stamp}-{os.getpid()}-{secrets.token_hex(3)}"


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_.@+" else "_" for c in name)
