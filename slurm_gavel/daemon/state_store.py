"""The daemon's state directory: one JSON state file written atomically, and a lock.

Crash safety: :meth:`StateStore.save` writes a temporary file in the same
directory, fsyncs it, renames it over ``state.json`` and fsyncs the directory.
A rename within one file system is atomic, so a daemon killed at any instant
leaves either the previous state or the new one, never half of either; the
directory fsync makes the rename itself survive a power cut. The previous state
is kept as ``state.json.prev`` so an admin can step back one round by hand.

Single writer: :meth:`StateStore.acquire` takes an exclusive ``fcntl.flock`` on
``daemon.lock`` and writes the holder's pid into it. The kernel drops the lock
when the holder dies (even by SIGKILL), so a stale lock file never blocks a
restart, while a second live daemon on the same directory is refused with the
pid of the first. Readers (`slurm-gavel status`) never take the lock.

Two files, two audiences: ``state.json`` is private (0600, the daemon's memory);
``status.json`` is the public view of it (0644, status_view.py), rewritten the
same atomic way after every save, for `slurm-gavel status` and `explain` run by
any user. The directory itself must be traversable (0755) for them to read it.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from slurm_gavel.atomic import write_atomic
from slurm_gavel.daemon.state_encode import Plan, encode_document
from slurm_gavel.daemon.status_view import parse_view
from slurm_gavel.errors import InputError

STATE_FORMAT = "slurm-gavel-state/1"
STATE_FILE = "state.json"
LOCK_FILE = "daemon.lock"
STATUS_FILE = "status.json"


class StateError(InputError):
    """The state directory cannot be used; the message names it and the fix."""


class StateSaveError(Exception):
    """The state file could not be written (a full disk, a read-only mount).

    Not an InputError and not a Slurm outage: the daemon logs it as its own event
    (``state_save_failed``) and keeps scheduling; the next save may succeed."""


class StateLockedError(StateError):
    """Another daemon holds the state directory's lock."""

    def __init__(self, state_dir: Path, pid: int | None) -> None:
        who = f"pid {pid}" if pid is not None else "a process whose pid is not recorded"
        super().__init__(
            f"state directory {state_dir} is locked by another slurm-gavel daemon ({who}); "
            "stop that daemon first, or give this one a different state_dir"
        )
        self.pid = pid


class StateStore:
    """State file and lock of one daemon. Use as a context manager to hold the lock."""

    def __init__(self, state_dir: str | Path) -> None:
        self.dir = Path(state_dir)
        self.path = self.dir / STATE_FILE
        self.prev_path = self.dir / (STATE_FILE + ".prev")
        self.lock_path = self.dir / LOCK_FILE
        self.view_path = self.dir / STATUS_FILE
        self._lock_fd: int | None = None
        # Active/standby (daemon/ha.py): the lease, not the flock, makes the writer;
        # the guard raises unless this daemon still leads, before every write.
        self._guard: Callable[[], None] | None = None

    def lead(self, guard: Callable[[], None]) -> None:
        """Write under a lease rather than the directory's flock: several daemons on
        several hosts share this directory, one leads, and `guard` (raising when this
        one no longer surely leads) is asked before every write."""
        self._guard = guard

    @property
    def writable(self) -> bool:
        return self._lock_fd is not None or self._guard is not None

    def _may_write(self, what: str) -> None:
        if not self.writable:
            # Only the lock holder writes; two writers would interleave rounds.
            raise RuntimeError(f"StateStore.{what}() called without holding the lock")
        if self._guard is not None:
            self._guard()

    # ---- lock ------------------------------------------------------------------------

    def acquire(self) -> None:
        """Take the directory's lock or raise StateLockedError naming the holder's pid."""
        if self._lock_fd is not None:
            return
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as e:
            raise StateError(
                f"state directory {self.dir}: cannot create the lock file ({e.strerror}); "
                "create the directory writable by the daemon's user or change state_dir"
            ) from e
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            os.close(fd)
            if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise StateLockedError(self.dir, self.holder_pid()) from None
            raise
        # The pid is informational (for the message above and for `status`); the
        # flock, not the file's content, is what excludes a second daemon.
        try:
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()}\n".encode())
            os.fsync(fd)
        except OSError as e:
            os.close(fd)  # drops the lock too
            raise StateError(
                f"{self.lock_path}: cannot record the daemon's pid ({e.strerror}); free "
                f"space on or fix the file system of {self.dir}"
            ) from e
        self._lock_fd = fd

    def release(self) -> None:
        self._guard = None
        if self._lock_fd is None:
            return
        # Truncate before unlocking so a reader never sees our pid after we let go.
        with contextlib.suppress(OSError):
            os.ftruncate(self._lock_fd, 0)
        fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
        os.close(self._lock_fd)
        self._lock_fd = None

    @property
    def locked(self) -> bool:
        return self._lock_fd is not None

    def holder_pid(self) -> int | None:
        """Pid written by the current lock holder, if any (does not test the lock)."""
        try:
            text = self.lock_path.read_text().strip()
        except OSError:
            return None
        return int(text) if text.isdigit() else None

    def daemon_alive(self) -> int | None:
        """Pid of a live daemon holding this directory, else None. Takes no lock."""
        pid = self.holder_pid()
        if pid is None:
            return None
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return None
        except PermissionError:
            return pid  # exists, owned by another user
        return pid

    def __enter__(self) -> StateStore:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    # ---- state file ------------------------------------------------------------------

    def save(self, state: dict[str, Any], plan: Plan | None = None) -> None:
        """Persist `state` atomically (write, fsync, rename, fsync the directory).
        Parts of it may be text encoded before (state_encode.py: Encoded values, and
        the mappings at `plan`'s paths through its Fragments).

        Raises StateSaveError, naming the file and the cause, when the file system
        refuses; the previous state.json is then left as it was."""
        self._may_write("save")
        doc = {"format": STATE_FORMAT, **state}
        # Compact on purpose: json's C encoder only runs without indent; indented, the
        # state of 5,000 jobs (~2 MB) took ~1 s per save, twice a round (benchmarks/
        # README.md, "A daemon round"). `python -m json.tool state.json` reads it.
        data = encode_document(doc, plan).encode()
        try:
            self._write(data)
        except OSError as e:
            raise StateSaveError(
                f"{self.path}: cannot save the state ({e.strerror or e}); free space on or "
                f"fix the permissions of {self.dir} (the daemon keeps scheduling and saves "
                "again next round)"
            ) from e

    def save_view(self, view: dict[str, Any], plan: Plan | None = None) -> None:
        """Write the public view (status.json, world-readable) atomically, the job
        records through `plan`'s Fragments (Publisher: each job's text kept while its
        record is unchanged). Raises StateSaveError like save(); the private state is
        saved first and stands."""
        self._may_write("save_view")
        data = encode_document(view, plan).encode()  # json.dumps' text, ensure_ascii
        try:
            self._write_file(data, self.view_path, mode=0o644)
        except OSError as e:
            raise StateSaveError(
                f"{self.view_path}: cannot write the status view ({e.strerror or e}); free "
                f"space on or fix the permissions of {self.dir}"
            ) from e

    def load_view(self) -> dict[str, Any] | None:
        """The public view, or None when the daemon has not written one yet."""
        text = _read_or_none(
            self.view_path,
            lambda why: (
                f"cannot read the status view ({why}); the admin makes it readable "
                f"with `chmod 0755 {self.dir}` (the state stays 0600)"
            ),
        )
        return None if text is None else parse_view(text, self.view_path, StateError)

    def _write(self, data: bytes) -> None:
        self._write_file(data, self.path)

    def _write_file(self, data: bytes, target: Path, mode: int = 0o600) -> None:
        """Atomic replace of `target` (of the state: its previous copy is kept)."""
        keep = self._keep_previous if target == self.path else None
        write_atomic(target, data, mode=mode, before_replace=keep)

    def _keep_previous(self) -> None:
        if self.path.exists():
            # A hard link keeps the previous round without a second full write.
            with contextlib.suppress(FileNotFoundError):
                self.prev_path.unlink()
            os.link(self.path, self.prev_path)

    def load(self) -> dict[str, Any] | None:
        """The saved state, or None when no daemon has saved one yet."""
        text = _read_or_none(self.path, lambda why: f"cannot read the state file ({why})")
        if text is None:
            return None
        try:
            doc = json.loads(text)
        except json.JSONDecodeError as e:
            # Cannot happen through save(); means someone edited or truncated the file.
            raise StateError(
                f"{self.path}: not valid JSON (line {e.lineno}: {e.msg}); restore "
                f"{self.prev_path.name} over it, or move it away to start accounting afresh"
            ) from e
        if not isinstance(doc, dict) or doc.get("format") != STATE_FORMAT:
            raise StateError(
                f'{self.path}: not a slurm-gavel state file (expected "format": '
                f'"{STATE_FORMAT}"); point state_dir at the daemon\'s own directory'
            )
        return doc

    def cleanup_temporaries(self) -> int:
        """Remove temp files a killed writer left behind; returns how many."""
        n = 0
        for p in [*self.dir.glob(f".{STATE_FILE}.*.tmp"), *self.dir.glob(f".{STATUS_FILE}.*.tmp")]:
            with contextlib.suppress(OSError):
                p.unlink()
                n += 1
        return n


def _read_or_none(path: Path, unreadable: Callable[[str], str]) -> str | None:
    """The file's text, None when it does not exist; a StateError naming it and saying
    ``unreadable(the OS's reason)`` when it cannot be read."""
    try:
        return path.read_text()
    except FileNotFoundError:
        return None
    except OSError as e:
        raise StateError(f"{path}: {unreadable(str(e.strerror))}") from e
