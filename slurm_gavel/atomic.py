"""Replace a file so that a crash or a power cut leaves the old file or the new one, never
half of either: the state, the status view and throughput tables are written this way.

The job library (slurm_gavel/job/) keeps its own copy for checkpoints: it must import
without the rest of the package.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Callable
from pathlib import Path


def write_atomic(
    target: Path,
    data: bytes,
    *,
    mode: int = 0o600,
    owner: int | None = None,
    before_replace: Callable[[], None] | None = None,
    sync_folder: bool = True,
) -> None:
    """Write `data` to a temporary file ``.<name>.<random>.tmp`` in `target`'s folder
    (a rename is atomic only within one file system), fsync it, rename it over
    `target`, then fsync the folder so that the rename itself survives a power cut.

    `mode` is set on the open file (no window in which it has mkstemp's 0600 or the
    umask's). `owner`: the uid the file is given (os.fchown, needs CAP_CHOWN), also
    before the rename, so the file never appears under `target` with another owner.
    `before_replace` runs once the data is on disk, just before the rename
    (the state store links the previous state aside there). On any error the
    temporary file is removed and `target` is left as it was; the error propagates.
    `sync_folder=False` leaves the folder's fsync to the caller, who
    writes many files in it and syncs it once (fsync_folder).
    """
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            if owner is not None:
                os.fchown(f.fileno(), owner, -1)
            if mode != 0o600:
                os.fchmod(f.fileno(), mode)
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        if before_replace is not None:
            before_replace()
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    if sync_folder:
        fsync_folder(target.parent)


def fsync_folder(folder: Path) -> None:
    """fsync a folder, so that the renames in it survive a power cut."""
    dir_fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
