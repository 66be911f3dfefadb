"""Progress reports from a running job to the slurm-gavel daemon, through a spool folder.

The admin sets ``GAVEL_PROGRESS_DIR`` (the daemon's ``progress_dir``, e.g. on the
shared file system) in the jobs' environment. The daemon makes one folder per user
in it, ``<progress_dir>/<uid>/``, owned by that user (mode 2750, group the daemon's),
so no user can write into another's. Each job keeps one file
``<progress_dir>/<uid>/<SLURM_JOB_ID>.json`` there (an array task's
``<SLURM_ARRAY_JOB_ID>_<SLURM_ARRAY_TASK_ID>.json``, the daemon's name for it), replaced
atomically (temp file + rename in the same folder) so the daemon never reads half a
report; the library refuses a folder that is a symlink, not its user's, or writable by
group or others, and never creates it (a warning says why no report is written). Format
(docs/user-guide.md repeats it)::

    {"format": "slurm-gavel-progress/1",
     "job_id": "1234",
     "job_type": "ResNet-50 (batch size 64)",   # null when not declared
     "steps": 5400,              # steps done in total, across restarts
     "steps_per_s": 4.37,        # measured over the current run, warm-up excluded;
                                 # null until two steps have been timed
     "run_steps": 400,           # steps done in the current run (since the last start)
     "restart_count": 2,         # SLURM_RESTART_COUNT of the current run
     "partner": "1235",          # the job sharing its GPU over the whole rate window
                                 # (set_partner), null when alone or not known
     "state": "running",         # running | checkpointed | finished
     "hostname": "v100-1",
     "gpu": "NVIDIA H100 80GB HBM3",   # first visible GPU's name, or "cpu"
     "updated": 1763800000.0}    # unix time of this report

A report is written at most every ``GAVEL_PROGRESS_INTERVAL`` seconds (default 30),
and always on checkpoint and at the end.

Sharing a GPU (space sharing, gres/shard): a job that knows its partner (the emulated
workloads read it from Slurm: workloads/emulate_pairs.py) calls
:meth:`ProgressReporter.set_partner`; the rate window restarts at each change, so
``steps_per_s`` is all time with that partner (or all time alone). The daemon learns
the pair cell from it when Slurm shows the same partner, and refuses a report naming
another (daemon/progress_learning.py). A sharing job naming none (partner unknown) is measured
by the daemon from two of its reports while it saw the pair together (pair_windows.py):
keep ``steps`` and ``run_steps`` honest.

Reading (:func:`open_report`, the daemon's way, and :func:`read_report`) treats the
file as hostile: opened with O_NOFOLLOW|O_NONBLOCK (a symlink is refused, a FIFO
never blocks), it must be a regular file, of the expected owner, at most
``REPORT_MAX_BYTES``, read with a bounded read, JSON without NaN/Infinity.
"""

from __future__ import annotations

import json
import os
import re
import socket
import stat
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from slurm_gavel.job.checkpoint import warn, write_atomic_at

if TYPE_CHECKING:
    from slurm_gavel.job.env import JobEnv

FORMAT = "slurm-gavel-progress/1"
REPORT_MAX_BYTES = 64 * 1024  # a real report is ~350 bytes
# Slurm job ids are digits (arrays: 123_4); anything else is never a file name here.
JOB_ID = re.compile(r"^[0-9A-Za-z_-]{1,64}$")
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class ReportRefused(Exception):
    """A file where a report should be that is not one the daemon may trust."""


def report_path(folder: str | Path, job_id: str, uid: int | None = None) -> Path:
    """``<folder>/<uid>/<job id>.json`` (uid: this process's by default)."""
    return Path(folder) / str(os.geteuid() if uid is None else uid) / f"{job_id}.json"


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number a report may hold")


def open_report(
    name: str, *, dir_fd: int | None = None, owner: int | None = None
) -> dict[str, Any] | None:
    """The report in file ``name`` (relative to ``dir_fd``), None if there is none.

    Raises :class:`ReportRefused` (the message says why) for a symlink, anything but a
    regular file, a file of another owner than ``owner``, one over REPORT_MAX_BYTES, or
    content that is not a slurm-gavel-progress/1 JSON object. Never blocks.
    """
    try:
        before = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None
    _check_file(before, owner)  # before opening: opening a device can have effects
    try:
        fd = os.open(name, _FILE_FLAGS, dir_fd=dir_fd)
    except FileNotFoundError:
        return None
    except OSError as e:  # ELOOP: swapped for a symlink since the stat
        raise ReportRefused(f"cannot open it ({e.strerror})") from None
    try:
        st = os.fstat(fd)
        _check_file(st, owner)
        if (st.st_dev, st.st_ino) != (before.st_dev, before.st_ino):
            raise ReportRefused("it was replaced while being opened")
        chunks: list[bytes] = []
        size = 0
        while size <= REPORT_MAX_BYTES:  # bounded even if the file grows meanwhile
            chunk = os.read(fd, REPORT_MAX_BYTES + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except OSError as e:
        raise ReportRefused(f"cannot read it ({e.strerror})") from None
    finally:
        os.close(fd)
    if size > REPORT_MAX_BYTES:
        raise ReportRefused(f"more than {REPORT_MAX_BYTES} bytes")
    try:
        data = json.loads(b"".join(chunks).decode("utf-8"), parse_constant=_no_constant)
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        raise ReportRefused(f"not JSON ({type(e).__name__})") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ReportRefused(f"not a {FORMAT} object")
    return data


def _check_file(st: os.stat_result, owner: int | None) -> None:
    if stat.S_ISLNK(st.st_mode):
        raise ReportRefused("a symlink")
    if not stat.S_ISREG(st.st_mode):
        raise ReportRefused("not a regular file (a FIFO, device, socket or folder)")
    if owner is not None and st.st_uid != owner:
        raise ReportRefused(f"owned by uid {st.st_uid}, not by the job's user (uid {owner})")
    if st.st_size > REPORT_MAX_BYTES:
        raise ReportRefused(f"{st.st_size} bytes, more than {REPORT_MAX_BYTES}")


def device_name() -> str:
    """Name of the first visible GPU (pynvml, then torch), or "cpu"."""
    if sys.modules.get("torch") is not None:
        import torch

        if torch.cuda.is_available():
            return str(torch.cuda.get_device_name(0))
        return "cpu"
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            if pynvml.nvmlDeviceGetCount() > 0:
                name = pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(0))
                return name.decode() if isinstance(name, bytes) else str(name)
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # no driver, no library: a CPU machine
        pass
    return "cpu"


@dataclass
class ProgressReporter:
    """Counts steps, measures steps/s and writes the spool file (if a folder is set)."""

    job_id: str | None
    job_type: str | None
    folder: Path | None
    interval: float = 30.0
    restart_count: int = 0
    start_step: int = 0
    steps: int = 0
    partner: str | None = None  # the job sharing its GPU (set_partner)
    _first_step_end: float | None = None  # warm-up (first step) excluded from the rate
    _rate_from: int | None = None  # steps when the rate window began
    _last_write: float = field(default=0.0)
    _gpu: str | None = None
    _warned: set[str] = field(default_factory=set)  # each spool problem said once

    def __post_init__(self) -> None:
        self.steps = self.start_step

    @classmethod
    def for_job(cls, env: JobEnv, *, active: bool) -> ProgressReporter:
        """The reporter of one job as its environment describes it; it writes to the
        spool only while `active` (inside a Slurm job, or when asked to)."""
        return cls(
            job_id=env.report_id,  # an array task's ARRAY_TASK, as the daemon names it
            job_type=env.job_type,
            folder=env.progress_dir if active else None,
            interval=env.progress_interval,
            restart_count=env.restart_count,
        )

    @property
    def run_steps(self) -> int:
        return self.steps - self.start_step

    def steps_per_s(self, now: float | None = None) -> float | None:
        if self._first_step_end is None or self._rate_from is None:
            return None
        steps = self.steps - self._rate_from
        elapsed = (time.monotonic() if now is None else now) - self._first_step_end
        return steps / elapsed if steps >= 1 and elapsed > 0 else None

    def set_partner(self, job_id: str | None) -> None:
        """The job now sharing this job's GPU (None: alone). A change restarts the rate
        window, so the reported rate never mixes two pairings."""
        if job_id == self.partner:
            return
        self.partner = job_id
        if self._first_step_end is not None:
            self._first_step_end, self._rate_from = time.monotonic(), self.steps

    def step_done(self) -> None:
        self.steps += 1
        if self._first_step_end is None:
            self._first_step_end, self._rate_from = time.monotonic(), self.steps
        if self.folder is not None and time.monotonic() - self._last_write >= self.interval:
            self.write("running")

    def report(self, state: str) -> dict[str, Any]:
        if self._gpu is None:
            self._gpu = device_name()
        rate = self.steps_per_s()
        return {
            "format": FORMAT,
            "job_id": self.job_id,
            "job_type": self.job_type,
            "steps": self.steps,
            "steps_per_s": None if rate is None else round(rate, 6),
            "run_steps": self.run_steps,
            "restart_count": self.restart_count,
            "partner": self.partner,
            "state": state,
            "hostname": socket.gethostname(),
            "gpu": self._gpu,
            "updated": time.time(),
        }

    def _warn_once(self, msg: str) -> None:
        if msg not in self._warned:
            self._warned.add(msg)
            warn(msg)

    def _own_folder(self) -> int | None:
        """An fd of ``<folder>/<uid>`` if it is this user's alone, else None (warned)."""
        assert self.folder is not None
        mine = self.folder / str(os.geteuid())
        try:
            fd = os.open(mine, _DIR_FLAGS)
        except FileNotFoundError:
            self._warn_once(
                f"no progress report: {mine} does not exist yet (the slurm-gavel daemon "
                f"makes it when it sees your job; if it never appears, ask the admin)"
            )
            return None
        except OSError as e:
            self._warn_once(f"no progress report: {mine} is a symlink or no folder ({e})")
            return None
        st = os.fstat(fd)
        if st.st_uid != os.geteuid() or st.st_mode & 0o022:
            os.close(fd)
            self._warn_once(
                f"no progress report: {mine} is not yours alone (owner uid {st.st_uid}, "
                f"mode {stat.S_IMODE(st.st_mode):04o}); the daemon would not trust it either"
            )
            return None
        return fd

    def write(self, state: str) -> None:
        """Replace the job's report file; a failing spool never stops training."""
        self._last_write = time.monotonic()
        if self.folder is None or self.job_id is None:
            return
        if not JOB_ID.match(self.job_id):
            self._warn_once(f"no progress report: job id {self.job_id!r} is not a file name")
            return
        fd = self._own_folder()
        if fd is None:
            return
        try:
            data = json.dumps(self.report(state), sort_keys=True).encode() + b"\n"
            # 0640: the folder's group (the daemon's, by its setgid bit) may read it
            write_atomic_at(fd, f"{self.job_id}.json", data, mode=0o640)
        except OSError as e:
            self._warn_once(f"cannot write the progress report in {self.folder}: {e}")
        finally:
            os.close(fd)


def read_report(path: str | Path, *, owner: int | None = None) -> dict[str, Any] | None:
    """A report written by :class:`ProgressReporter`, or None if absent or not one.

    As careful as the daemon (:func:`open_report`): a symlink, FIFO, device, huge file,
    a file of another owner than ``owner``, or malformed content gives None.
    """
    try:
        return open_report(str(path), owner=owner)
    except ReportRefused:
        return None
