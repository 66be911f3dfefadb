"""A job's owner on the fake Slurm: the commands a user runs on their own job, as the
shipped job_submit.lua lets them through (FakeSlurm.owner)."""

from __future__ import annotations

from typing import Protocol

from slurm_gavel.backends.slurm.user_holds import held_by_owner, with_user_hold
from slurm_gavel.domain.model import JobId
from slurm_gavel.testing.fakes import HELD_USER, FakeJob

PREFIX = "gavel:"


class OwnerError(Exception):
    """A command the Lua or Slurm refuses the owner (the text is Slurm's error line)."""


class Jobs(Protocol):
    """What the owner's commands need of the fake (FakeSlurm)."""

    lua: bool

    def job(self, name: JobId) -> FakeJob: ...

    def take_priority(self) -> int: ...

    def requeue(self, job: FakeJob, *, state: str) -> None: ...


def without_user_hold(comment: str) -> str:
    """The comment without hold=user (job_submit.lua's without_user_hold)."""
    keys = [k for k in comment[len(PREFIX) :].split(",") if k and k != "hold=user"]
    return PREFIX + ",".join(keys)


class Owner:
    def __init__(self, slurm: Jobs) -> None:
        self.slurm = slurm

    def hold(self, name: JobId) -> None:
        """`scontrol hold` (or uhold) by the owner: the Lua marks a managed job hold=user."""
        job = self.slurm.job(name)
        if job.state not in ("PENDING", "SPECIAL_EXIT"):
            raise OwnerError(f"Job is no longer pending execution for job {name}")
        if self.slurm.lua and job.comment.startswith(PREFIX) and not held_by_owner(job.comment):
            job.comment = with_user_hold(job.comment)
        job.priority, job.reason = 0, HELD_USER

    def release(self, name: JobId) -> None:
        """`scontrol release` by the owner: of a managed job marked hold=user the Lua
        removes the key and leaves it held, now by the daemon; of any other managed job
        it refuses; a plain job is released."""
        job = self.slurm.job(name)
        if self.slurm.lua and job.comment.startswith(PREFIX):
            if not held_by_owner(job.comment):
                raise OwnerError(
                    f"slurm-gavel: job {name} is managed by the gavel scheduler, which "
                    "releases it when it places it; scancel it to withdraw it"
                )
            job.comment = without_user_hold(job.comment)
            return
        if job.held:
            job.priority, job.reason = self.slurm.take_priority(), "None"

    def requeuehold(self, name: JobId) -> None:
        """`scontrol requeuehold` by the owner (Slurm calls no job_submit hook for it)."""
        job = self.slurm.job(name)
        if job.state == "RUNNING":
            self.slurm.requeue(job, state="PENDING")
