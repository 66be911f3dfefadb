"""Progress reports from a running job to the slurm-gavel daemon, through a spool folder.

The admin sets ``GAVEL_PROGRESS_DIR`` (a folder every job can write and the daemon
can read, e.g. on the shared file system) in the jobs' environment. Each job keeps
one file ``<SLURM_JOB_ID>.json`` there, replaced atomically (temp file + rename) so
the daemon never reads half a report. Format (docs/user-guide.md repeats it)::

    {"format": "slurm-gavel-progress/1",
     "job_id": "1234",
     "job_type": "ResNet-50 (batch size 64)",   # null when not declared
     "steps": 5400,              # steps done in total, across restarts
     "steps_per_s": 4.37,        # measured over the current run, warm-up excluded;
                                 # null until two steps have been timed
     "run_steps": 400,           # steps done in the current run (since the last start)
     "restart_count": 2,         # SLURM_RESTART_COUNT of the current run
     "state": "running",         # running | checkpointed | finished
     "hostname": "v100-1",
     "gpu": "NVIDIA H100 80GB HBM3",   # first visible GPU's name, or "cpu"
     "updated": 1763800000.0}    # unix time of this report

A report is written at most every ``GAVEL_PROGRESS_INTERVAL`` seconds (default 30),
and always on checkpoint and at the end.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from slurm_gavel.job.checkpoint import warn, write_atomic

FORMAT = "slurm-gavel-progress/1"


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
    _first_step_end: float | None = None  # warm-up (first step) excluded from the rate
    _last_write: float = field(default=0.0)
    _gpu: str | None = None

    def __post_init__(self) -> None:
        self.steps = self.start_step

    @property
    def run_steps(self) -> int:
        return self.steps - self.start_step

    def steps_per_s(self, now: float | None = None) -> float | None:
        if self._first_step_end is None or self.run_steps < 2:
            return None
        elapsed = (time.monotonic() if now is None else now) - self._first_step_end
        return (self.run_steps - 1) / elapsed if elapsed > 0 else None

    def step_done(self) -> None:
        self.steps += 1
        if self._first_step_end is None:
            self._first_step_end = time.monotonic()
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
            "state": state,
            "hostname": socket.gethostname(),
            "gpu": self._gpu,
            "updated": time.time(),
        }

    def write(self, state: str) -> None:
        """Replace the job's report file; a failing spool never stops training."""
        self._last_write = time.monotonic()
        if self.folder is None or self.job_id is None:
            return
        try:
            data = json.dumps(self.report(state), sort_keys=True).encode() + b"\n"
            path = self.folder / f"{self.job_id}.json"
            write_atomic(path, data)
            os.chmod(path, 0o644)
        except OSError as e:
            warn(f"cannot write the progress report in {self.folder}: {e}")


def read_report(path: str | Path) -> dict[str, Any] | None:
    """A report written by :class:`ProgressReporter`, or None if absent or not one."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError):
        return None
    return data if isinstance(data, dict) and data.get("format") == FORMAT else None
