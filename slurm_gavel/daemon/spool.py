"""The progress spool on the daemon's side: one folder per user, files read as hostile.

Layout: ``<progress_dir>/<uid>/<job id>.json``. The admin owns ``progress_dir``
(mode 0755, not writable by users); the daemon makes ``<uid>/`` the first time it sees
a managed job of that user, then hands it over:

    mkdir <uid> 0700 -> chmod 2750 -> chown <uid>:<daemon's group>

so the user (and no one else) can write reports there, the daemon's group can read
them (setgid: the user's files inherit that group; the job library writes them 0640),
and the folder is never, even for an instant, open to anyone else. Numeric uids, not
user names: no name-service lookup (LDAP can hang) in the round, and the uid is what
the owner check compares. A daemon running as root needs nothing more; a daemon
running as its own user needs CAP_CHOWN for the chown (docs/admin-guide.md).

Nothing here blocks: files are opened with O_NOFOLLOW|O_NONBLOCK relative to folder
fds opened with O_NOFOLLOW (slurm_gavel/job/progress.py:open_report).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from slurm_gavel.job.progress import JOB_ID, ReportRefused, open_report

USER_DIR_MODE = 0o2750
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class SpoolProblem(Exception):
    """The spool (or one user's folder in it) cannot be trusted; the text says the fix."""


def open_root(root: Path) -> int:
    """An fd of ``progress_dir``, created 0755 if missing; refused if users can write it."""
    try:
        root.mkdir(mode=0o755, parents=True, exist_ok=True)
        fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as e:
        raise SpoolProblem(f"progress_dir {root}: {e.strerror}") from None
    st = os.fstat(fd)
    if st.st_mode & 0o022 or st.st_uid not in (0, os.geteuid()):
        os.close(fd)
        raise SpoolProblem(
            f"progress_dir {root} is writable by others or owned by uid {st.st_uid} (mode "
            f"{stat.S_IMODE(st.st_mode):04o}): users could plant each other's folders; "
            f"fix: chown the daemon's user, chmod 0755 (the daemon makes a folder per user)"
        )
    return fd


def open_user_dir(root_fd: int, root: Path, uid: int, gid: int) -> int:
    """An fd of ``<root>/<uid>``, made and handed to ``uid`` if missing; checked."""
    name = str(uid)
    try:
        st = os.stat(name, dir_fd=root_fd, follow_symlinks=False)
    except FileNotFoundError:
        return _make_user_dir(root_fd, root, uid, gid)
    where = root / name
    if not stat.S_ISDIR(st.st_mode):  # a symlink too (lstat)
        raise SpoolProblem(
            f"{where} is not a folder (a symlink?): remove it; the daemon remakes it"
        )
    if st.st_uid != uid:
        raise SpoolProblem(
            f"{where} belongs to uid {st.st_uid}, not {uid}: remove it; the daemon remakes it"
        )
    if st.st_mode & 0o022:
        raise SpoolProblem(
            f"{where} is writable by group or others (mode {stat.S_IMODE(st.st_mode):04o}): "
            f"reports there are not trusted; fix: chmod {USER_DIR_MODE:o} {where}"
        )
    if os.geteuid() != 0 and st.st_gid != gid and st.st_gid not in os.getgroups():
        # e.g. made by a daemon that ran as root before: this one could not read it
        raise SpoolProblem(
            f"{where} has group {st.st_gid}, not the daemon's ({gid}): its reports cannot "
            f"be read; fix: chgrp -R {gid} {where} && chmod {USER_DIR_MODE:o} {where}"
        )
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=root_fd)
    except OSError as e:
        raise SpoolProblem(f"{where}: {e.strerror}") from None


def _make_user_dir(root_fd: int, root: Path, uid: int, gid: int) -> int:
    name = str(uid)
    try:
        os.mkdir(name, 0o700, dir_fd=root_fd)
        fd = os.open(name, _DIR_FLAGS, dir_fd=root_fd)
    except OSError as e:
        raise SpoolProblem(f"cannot make {root / name}: {e.strerror}") from None
    try:
        os.fchmod(fd, USER_DIR_MODE)  # still the daemon's: no capability needed
        os.fchown(fd, uid, gid)  # a directory keeps its setgid bit through chown
    except OSError as e:
        os.close(fd)
        os.rmdir(name, dir_fd=root_fd)
        raise SpoolProblem(
            f"cannot hand {root / name} to uid {uid} ({e.strerror}): the daemon needs "
            f"CAP_CHOWN (AmbientCapabilities=CAP_CHOWN in its unit) or to run as root"
        ) from None
    return fd


def read_user_report(user_fd: int, job_id: str, uid: int) -> dict[str, object] | None:
    """The report of ``job_id`` in its user's folder; ReportRefused if not trustworthy."""
    if not JOB_ID.match(job_id):
        raise ReportRefused(f"job id {job_id!r} is not a report name")
    return open_report(f"{job_id}.json", dir_fd=user_fd, owner=uid)
