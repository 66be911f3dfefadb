"""The argument lists and stdin lines of the CLI transport's acts. Pure: no shell is
ever involved (job comments and names are user text), so each value is one argv
element or one line scontrol reads."""

from __future__ import annotations

from collections.abc import Iterable

from slurm_gavel.backends.slurm.shard_pairs import StartOrder
from slurm_gavel.domain.model import JobId


def job_list(ids: Iterable[JobId]) -> str:
    return ",".join(ids)


def render_update(order: StartOrder) -> str:
    """One scontrol line (read from stdin, never a shell) placing a waiting job."""
    return (
        f"update JobId={order.job_id} Partition={order.partition} "
        f"NumNodes={len(order.nodes)}-{len(order.nodes)} NodeList={','.join(order.nodes)} "
        f"Gres={order.gres()} StartTime=now"
    )


def requeuehold_argv(ids: list[JobId]) -> list[str]:
    """`scontrol requeuehold Incomplete`: the preemption of jobs that ignored the
    checkpoint signal. Without `Incomplete`, Slurm also requeues a batch job that has
    ended (COMPLETED, FAILED, or still COMPLETING), so a job that finished between
    the daemon's last look at it and this command ran again from its last checkpoint
    (CI, 24.11: a job done during a slurmd restart ran a second time). With it, Slurm
    requeues only CONFIGURING, RUNNING, STOPPED or SUSPENDED jobs and skips the rest
    without an error, in one step: no race (22.05 to 26.05; slurmrestd 26.05's
    POST /jobs/requeue takes the same flag)."""
    return ["scontrol", "requeuehold", "Incomplete", job_list(ids)]


def signal_argv(ids: list[JobId], signal: str) -> list[str]:
    """The checkpoint signal to each job's batch script only (not its steps). Verbose:
    without -v, scancel prints nothing for a job that has ended ("already completing
    or completed", "Invalid job id") yet exits non-zero, so no error names the job and
    the act counted every job of the command unsignalled, those that got it too."""
    return ["scancel", "-v", f"--signal={signal}", "--batch", *ids]
