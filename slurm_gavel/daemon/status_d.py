"""The per-user status views on disk: ``<state_dir>/status.d/<uid>.json``.

Written by the daemon in private mode (status_private.py says what they hold), read
by `slurm-gavel status` and `explain` run by that user. Each file is 0600 and owned
by its user: it is written to a temporary file, given to the user with os.fchown
(the daemon needs CAP_CHOWN for that; the shipped systemd unit grants it) and
renamed over the old one (atomic.py), so no other user can read it at any moment,
and a symlink planted under its name is replaced, never followed (rename replaces
the link itself; the temporary file is created with O_EXCL).

The folder is the daemon's (0755, owned by the daemon's uid); one found as anything
else (a symlink, a file) is replaced, one owned by another uid is refused. Views of
users with no managed job any more are removed at the same pass.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

from slurm_gavel.atomic import fsync_folder, write_atomic
from slurm_gavel.daemon.status_view import parse_view
from slurm_gavel.errors import InputError

VIEWS_DIR = "status.d"
_VIEW_NAME = re.compile(r"[0-9]+\.json")


def views_dir(state_dir: Path) -> Path:
    return state_dir / VIEWS_DIR


def view_path(state_dir: Path, uid: int) -> Path:
    return views_dir(state_dir) / f"{int(uid)}.json"


def _own_dir(path: Path) -> None:
    """Make `path` a real directory of this uid, mode 0755, without following links."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        os.mkdir(path, 0o755)
        st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode):  # a symlink or a file: the folder is the daemon's
        os.unlink(path)
        os.mkdir(path, 0o755)
        st = os.lstat(path)
    if st.st_uid != os.geteuid():
        raise PermissionError(
            f"{path} is owned by uid {st.st_uid}, not the daemon's ({os.geteuid()}); "
            f"remove it (the daemon creates it again)"
        )
    if stat.S_IMODE(st.st_mode) != 0o755:  # the umask's, or changed by hand
        os.chmod(path, 0o755)


def write_views(
    state_dir: Path,
    views: dict[int, dict[str, Any]],
    encode: Callable[[int, dict[str, Any]], str] | None = None,
) -> dict[int, str]:
    """Write each uid's view (0600, owned by the uid) and remove the views and
    temporary files of other uids; returns the uids that failed, with why. Raises
    OSError when the folder itself cannot be made. ``encode(uid, view)``: the view's
    JSON text as json.dumps writes it (the Publisher's, which keeps each job's text
    between saves); None: json.dumps."""
    folder = views_dir(state_dir)
    _own_dir(folder)
    me = os.geteuid()
    failed: dict[int, str] = {}
    for uid, view in views.items():
        text = encode(uid, view) if encode is not None else json.dumps(view, separators=(",", ":"))
        data = text.encode()  # ensure_ascii
        try:
            write_atomic(view_path(state_dir, uid), data, owner=None if uid == me else uid,
                         sync_folder=False)  # fmt: skip
        except OSError as e:
            failed[uid] = f"{e.strerror or e}"
    _remove_others(folder, {f"{uid}.json" for uid in views})
    # One fsync of the folder for all the renames, not one per file: the views of 1,000
    # users took 0.57-1.0 s per save instead of 1.0-1.5 s (benchmarks/README.md).
    fsync_folder(folder)
    return failed


def remove_views(state_dir: Path) -> None:
    """Remove every user's view and the folder (public mode: status.json has it all)."""
    folder = views_dir(state_dir)
    with contextlib.suppress(FileNotFoundError):
        if not stat.S_ISDIR(os.lstat(folder).st_mode):
            os.unlink(folder)
            return
        _remove_others(folder, set())
        os.rmdir(folder)


def _remove_others(folder: Path, keep: set[str]) -> None:
    """Unlink the views not in `keep` and the temporaries a killed writer left (the
    daemon is the only writer and holds the state lock)."""
    for name in os.listdir(folder):
        ours = _VIEW_NAME.fullmatch(name) or (name.startswith(".") and name.endswith(".tmp"))
        if ours and name not in keep:
            with contextlib.suppress(FileNotFoundError, IsADirectoryError):
                os.unlink(folder / name)


def read_view(state_dir: Path, uid: int) -> dict[str, Any] | None:
    """This uid's view, or None when it has none (no managed job)."""
    path = view_path(state_dir, uid)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        return None
    except OSError as e:
        raise InputError(
            f"{path}: cannot read your status view ({e.strerror}); the daemon writes it "
            "owned by you, 0600: ask the admin to check the daemon's log"
        ) from e
    with os.fdopen(fd) as f:
        text = f.read()
    return parse_view(text, path, InputError)
