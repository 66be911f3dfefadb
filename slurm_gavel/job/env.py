"""What a training job learns from its environment (Slurm, the SPANK plugin, the admin).

Every variable is optional; outside Slurm the defaults make the library a no-op.

==========================  ==========================================================
GAVEL_JOB_TYPE              job type (``--gavel-job-type``); also read from
                            SLURM_SPANK_GAVEL_JOB_TYPE (set by the plugin even with
                            ``--export=NONE``)
GAVEL_CHECKPOINT_DIR        where checkpoints go (``--gavel-checkpoint-dir``); default
                            ``$SLURM_SUBMIT_DIR/gavel-checkpoints``; a ``<job id>``
                            folder is made inside it
GAVEL_PRIORITY              priority weight (informational inside the job)
GAVEL_TOTAL_STEPS           total steps (``--gavel-steps``), a default for the loop
GAVEL_REQUEUE_EXIT_CODE     exit code after a checkpoint (default 99, Slurm's
                            ``RequeueExitHold``)
GAVEL_CHECKPOINT_SIGNAL     signal that asks for a checkpoint (default USR1)
GAVEL_CHECKPOINT_ALLOW_PICKLE  1: load checkpoints with full unpickling (default 0:
                            plain data and tensors only; see job/checkpoint.py)
GAVEL_PROGRESS_DIR          spool folder for progress reports (unset: no reports)
GAVEL_PROGRESS_INTERVAL     seconds between progress reports (default 30)
SLURM_JOB_ID                the job id; without it the library does nothing
SLURM_ARRAY_JOB_ID,         an array task's array id and task number: its progress
SLURM_ARRAY_TASK_ID         reports go under ``<array>_<task>`` ("28_2"), the name
                            the daemon gives the task (its SLURM_JOB_ID is another
                            number); either one unset or not a number: SLURM_JOB_ID
SLURM_RESTART_COUNT         > 0: the job was requeued, resume from a checkpoint
==========================  ==========================================================
"""

from __future__ import annotations

import os
import re
import signal
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from slurm_gavel.job._errors import InputError

DEFAULT_REQUEUE_EXIT_CODE = 99
DEFAULT_PROGRESS_INTERVAL = 30.0
_SLURM_NUMBER = re.compile(r"[0-9]{1,20}", re.ASCII)


class JobEnvError(InputError):
    """A GAVEL_* variable has a value the library cannot use."""


@dataclass(frozen=True)
class JobEnv:
    job_id: str | None
    restart_count: int
    job_type: str | None
    checkpoint_dir: Path | None
    priority: float | None
    total_steps: int | None
    requeue_exit_code: int
    checkpoint_signal: signal.Signals
    progress_dir: Path | None
    progress_interval: float
    checkpoint_allow_pickle: bool = False
    # An array task's name as the daemon gives it ("28_2"), None for any other job.
    array_task: str | None = None

    @property
    def in_slurm(self) -> bool:
        return self.job_id is not None

    @property
    def report_id(self) -> str | None:
        """The id its progress reports go under: the daemon's name for the job (an
        array task's ARRAY_TASK; backends/slurm/arrays.py), else SLURM_JOB_ID."""
        return self.array_task if self.job_id is not None and self.array_task else self.job_id

    @property
    def resuming(self) -> bool:
        return self.restart_count > 0


def _gavel(env: Mapping[str, str], name: str) -> str | None:
    value = env.get(f"GAVEL_{name}") or env.get(f"SLURM_SPANK_GAVEL_{name}")
    return value.strip() if value and value.strip() else None


def _number(env: Mapping[str, str], name: str, default: float, *, integer: bool) -> float:
    text = _gavel(env, name)
    if text is None:
        return default
    try:
        value = int(text) if integer else float(text)
    except ValueError:
        raise JobEnvError(f"GAVEL_{name}={text!r} is not a number; unset it or fix it") from None
    return value


def _signal(text: str | None) -> signal.Signals:
    if text is None:
        return signal.SIGUSR1
    name = text.upper()
    if name.isdigit():
        try:
            return signal.Signals(int(name))
        except ValueError:
            pass
    else:
        name = name if name.startswith("SIG") else f"SIG{name}"
        if hasattr(signal.Signals, name):
            return signal.Signals[name]
    raise JobEnvError(f"GAVEL_CHECKPOINT_SIGNAL={text!r} is not a signal (e.g. USR1, USR2, TERM)")


def _flag(env: Mapping[str, str], name: str) -> bool:
    text = _gavel(env, name)
    if text is None or text.lower() in ("0", "no", "false", "off"):
        return False
    if text.lower() in ("1", "yes", "true", "on"):
        return True
    raise JobEnvError(f"GAVEL_{name}={text!r} must be 1 or 0; unset it or fix it")


def read_env(env: Mapping[str, str] | None = None) -> JobEnv:
    """Read the job's settings from ``env`` (default ``os.environ``)."""
    env = os.environ if env is None else env
    job_id = env.get("SLURM_JOB_ID") or None
    try:
        restarts = int(env.get("SLURM_RESTART_COUNT", "0") or "0")
    except ValueError:
        restarts = 0
    ckpt = _gavel(env, "CHECKPOINT_DIR")
    checkpoint_dir: Path | None = None
    if ckpt is not None:
        checkpoint_dir = Path(ckpt)
    elif job_id is not None:
        checkpoint_dir = Path(env.get("SLURM_SUBMIT_DIR") or ".") / "gavel-checkpoints"
    if checkpoint_dir is not None and job_id is not None:
        # Several jobs may share one --gavel-checkpoint-dir; a requeued job keeps its id.
        checkpoint_dir = checkpoint_dir / job_id
    code = int(_number(env, "REQUEUE_EXIT_CODE", DEFAULT_REQUEUE_EXIT_CODE, integer=True))
    if not 1 <= code <= 255:
        raise JobEnvError(f"GAVEL_REQUEUE_EXIT_CODE={code} must be 1..255")
    progress = _gavel(env, "PROGRESS_DIR")
    array, task = env.get("SLURM_ARRAY_JOB_ID", ""), env.get("SLURM_ARRAY_TASK_ID", "")
    array_task = None
    if _SLURM_NUMBER.fullmatch(array) and _SLURM_NUMBER.fullmatch(task):
        array_task = f"{int(array)}_{int(task)}"
    priority = _gavel(env, "PRIORITY")
    steps = _gavel(env, "TOTAL_STEPS")
    return JobEnv(
        job_id=job_id,
        restart_count=max(restarts, 0),
        job_type=_gavel(env, "JOB_TYPE"),
        checkpoint_dir=checkpoint_dir,
        priority=None if priority is None else _number(env, "PRIORITY", 1.0, integer=False),
        total_steps=None if steps is None else int(_number(env, "TOTAL_STEPS", 0, integer=True)),
        requeue_exit_code=code,
        checkpoint_signal=_signal(_gavel(env, "CHECKPOINT_SIGNAL")),
        progress_dir=Path(progress) if progress else None,
        progress_interval=_number(
            env, "PROGRESS_INTERVAL", DEFAULT_PROGRESS_INTERVAL, integer=False
        ),
        checkpoint_allow_pickle=_flag(env, "CHECKPOINT_ALLOW_PICKLE"),
        array_task=array_task,
    )
