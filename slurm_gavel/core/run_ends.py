"""How a managed job's run ended, as a backend saw it: the facts the daemon's watch on
crash loops and on jobs that never checkpoint is built from (daemon/run_watch.py).

A backend that can tell (the Slurm backend: backends/slurm/ended_runs.py) reports, each
observe, the runs that ended since the last one, by what ended them; it decides
nothing. Plain values only.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from slurm_gavel.domain.model import JobId


class RunEndKind(StrEnum):
    # Left its GPUs after the daemon's checkpoint signal and was requeued held (the job
    # library's exit 99): the way a preemption should end.
    CHECKPOINTED = "checkpointed"
    # Still running at the end of its grace after the signal: the daemon requeue-held it,
    # and whatever it did since its last checkpoint is lost.
    IGNORED_SIGNAL = "ignored_signal"
    # Ended for good by the checkpoint signal itself (no handler: the signal's default
    # action killed it; Slurm shows FAILED 0:10 for SIGUSR1).
    KILLED_BY_SIGNAL = "killed_by_signal"
    # Requeued without the daemon's signal: it exited with the requeue code on its own
    # (at once: a crash loop; after a long run: its own time-limit checkpoint), Slurm
    # could not launch it, or its node failed. RunEnd.ran_s says how long it ran.
    UNSIGNALLED = "unsignalled"


@dataclass(frozen=True)
class RunEnd:
    job_id: JobId
    kind: RunEndKind
    # What the backend saw, in its own words (an exit code, a signal, a run's length):
    # built from Slurm's numbers only, never from text a user wrote.
    detail: str = ""
    # UNSIGNALLED: the longest the run was seen running (a lower bound of its length);
    # None when no observe saw it run (it ended within a round of its start).
    ran_s: float | None = None
