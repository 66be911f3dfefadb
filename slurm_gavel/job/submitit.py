"""submitit under slurm-gavel: checkpoint and exit for the daemon, never requeue.

submitit's own preemption path (``checkpoint()`` on USR2, then ``scontrol requeue``)
puts the job back in the queue un-held, behind the daemon's back. Two ways instead:

1. **GavelJob inside the submitted function** (any function, recommended): the
   function is run again from the start after the requeue and GavelJob resumes from
   its checkpoint. Only the executor needs :func:`gavel_executor_parameters`.
2. **A Checkpointable class**: derive from :class:`GavelCheckpointable` instead of
   ``submitit.helpers.Checkpointable``. On the checkpoint signal (USR1) rank 0 calls
   your ``checkpoint()`` as submitit would, stores the returned submission where
   submitit reads it on the next start, and every rank exits with the requeue-hold
   code (99): Slurm holds the job, the daemon releases it, submitit calls the
   checkpointed object again. No ``scontrol requeue``.

    executor = submitit.AutoExecutor(folder="runs")
    executor.update_parameters(timeout_min=600, **gavel_executor_parameters(
        job_type="ResNet-50 (batch size 64)", gpus=1))
    job = executor.submit(Train(), 10_000)

submitit's own USR2 handler (its time-limit path, ``#SBATCH --signal=USR2@90``) is
left alone; the daemon's signal must differ from it (``SUBMITIT_PREEMPT_SIGNAL``).
docs/frameworks/submitit.md has the full example.
"""

from __future__ import annotations

import functools
import os
import signal
import sys
import threading
from types import FrameType
from typing import Any

import submitit
from submitit.core import utils as submitit_utils

from slurm_gavel.job.checkpoint import warn
from slurm_gavel.job.env import JobEnvError, read_env

# Batch-script lines: a shell function `srun` (found before the command) that runs the
# real srun in the background and passes the checkpoint signal (USR1) on to it, then
# returns srun's exit status (99 when the tasks exit for requeue-hold). It also sizes
# srun from the allocation as it is now: after the daemon changed a held job's node
# count (a moldable job), the batch environment still holds the submission's
# SLURM_NTASKS/SLURM_NPROCS, and srun would start that many tasks; submitit always
# sets --ntasks-per-node, so nodes x tasks per node is the count.
SRUN_FORWARDING = (
    "srun() {",
    '  case "$SLURM_JOB_NUM_NODES:$SLURM_NTASKS_PER_NODE" in',
    "    *[!0-9:]*|:*|*:) ;;",
    "    *) local -x SLURM_NTASKS=$((SLURM_JOB_NUM_NODES * SLURM_NTASKS_PER_NODE))",
    '       local -x SLURM_NPROCS="$SLURM_NTASKS" ;;',
    "  esac",
    '  command srun "$@" & local pid=$! rc',
    "  trap 'kill -USR1 '\"$pid\"' 2>/dev/null' USR1",
    '  while :; do wait "$pid"; rc=$?; kill -0 "$pid" 2>/dev/null || return "$rc"; done',
    "}",
)


def gavel_executor_parameters(
    job_type: str | None = None, *, gpus: int | None = None, steps: int | None = None
) -> dict[str, Any]:
    """Parameters for ``AutoExecutor.update_parameters`` so the job suits the daemon.

    ``--requeue`` (the requeue-hold exit needs it); :data:`SRUN_FORWARDING` as setup
    lines (the daemon signals the batch shell only, which waits on submitit's srun
    in the foreground and would run a trap only after it ends: the function runs srun
    in the background and passes the signal on; srun forwards it to every task);
    and, given a job type, the ``gavel:`` comment that makes the job managed (for
    sites without the SPANK plugin's ``--gavel-job-type``).
    """
    extra: dict[str, Any] = {"requeue": True}
    if job_type is not None:
        comment = f"gavel:type={job_type}"
        if gpus is not None:
            comment += f",scale={gpus}"
        if steps is not None:
            comment += f",steps={steps}"
        extra["comment"] = comment
    return {"slurm_additional_parameters": extra, "slurm_setup": list(SRUN_FORWARDING)}


class GavelCheckpointable(submitit.helpers.Checkpointable):
    """A submitit Checkpointable that checkpoints for slurm-gavel instead of requeueing.

    Subclass it as you would ``Checkpointable``; ``__call__`` is wrapped so that, in a
    Slurm job run by submitit, the checkpoint signal handler is in place while it runs.
    """

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        call = cls.__dict__.get("__call__")
        if call is None or getattr(call, "_gavel_wrapped", False):
            return

        @functools.wraps(call)
        def wrapped(self: GavelCheckpointable, *args: Any, **kw: Any) -> Any:
            _install_handler(self, args, kw)
            return call(self, *args, **kw)

        wrapped._gavel_wrapped = True  # type: ignore[attr-defined]
        cls.__call__ = wrapped  # type: ignore[method-assign]


def _install_handler(obj: GavelCheckpointable, args: tuple[Any, ...], kw: dict[str, Any]) -> None:
    env = read_env()
    if not env.in_slurm or "SUBMITIT_FOLDER" not in os.environ:
        return  # called locally, or by another launcher: nothing to hand over
    if threading.current_thread() is not threading.main_thread():
        warn("GavelCheckpointable called outside the main thread: no checkpoint handler")
        return
    job_env = submitit.JobEnvironment()
    if env.checkpoint_signal == job_env._usr_sig():
        raise JobEnvError(
            f"GAVEL_CHECKPOINT_SIGNAL and SUBMITIT_PREEMPT_SIGNAL are both "
            f"{env.checkpoint_signal.name}: submitit would requeue the job itself; "
            f"set SUBMITIT_PREEMPT_SIGNAL to another signal (its default USR2)"
        )
    submitted = job_env.paths.submitted_pickle
    first = submitit_utils.DelayedSubmission.load(submitted)  # its timeout settings

    def on_signal(signum: int, frame: FrameType | None) -> None:
        code = env.requeue_exit_code
        if job_env.global_rank == 0:
            new = obj.checkpoint(*args, **kw)
            if new is not None:
                new.set_timeout(first._timeout_min, first._timeout_countdown)
                with submitit_utils.temporary_save_path(submitted) as tmp:  # then renamed
                    new.dump(tmp)
            warn(f"checkpointed for slurm-gavel ({submitted.name}); exiting {code}")
        sys.stdout.flush()
        raise SystemExit(code)

    signal.signal(env.checkpoint_signal, on_signal)
