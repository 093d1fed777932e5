"""The one atomic write: a file is whole or absent, never half-written.

Every file faultbench keeps (a run's attempt, a stored answer, a doctor check, a
diagnoser's result file) is written to a temporary ``.part`` name in its folder and
then given its name in one step, so a crash or a full disk leaves the old file or
none, and a reader never sees a truncated one (the store's globs skip ``.part``).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def write_atomic(path: Path, data: str | bytes, *, exclusive: bool = False) -> Path:
    """Write ``data`` to ``path`` whole or not at all.

    Args:
        path: The file; its folder is created if missing.
        data: Text (UTF-8) or bytes.
        exclusive: Never replace an existing file (a run's attempt is written once):
            the name is linked, which fails if it exists, and the data and the new
            name are synced to disk first. Otherwise the file replaces any old one
            (two processes writing the same answer: either one wins).

    Returns:
        ``path``.

    Raises:
        OSError: the folder cannot be created or written, or (``exclusive``) the
            file exists.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".part")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data.encode() if isinstance(data, str) else data)
            if exclusive:
                fh.flush()
                os.fsync(fh.fileno())
        if exclusive:
            os.link(tmp, path)  # fails rather than overwrite an existing file
        else:
            os.replace(tmp, path)
    finally:
        Path(tmp).unlink(missing_ok=True)
    if exclusive:
        _fsync_dir(path.parent)  # the new name itself survives a power cut
    return path


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
