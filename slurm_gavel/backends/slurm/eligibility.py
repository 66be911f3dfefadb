"""Whether Slurm would start a waiting managed job if the daemon placed it now, and if
not, why (ObservedJob.waiting_on): GPUs given to such a job sit idle while runnable
jobs wait, and time "received" there is false fairness credit. Pure.

Three kinds of reason, each read from what Slurm reports of every release:

* its dependency (``--dependency``): squeue's Dependency text, "afterok:12(unfulfilled)"
  while it waits, "(failed)" once it can never be satisfied; "" when none is left. A
  singleton alone ("singleton(unfulfilled)") is read by the daemon itself from the jobs
  listed (singleton_free): Slurm updates a held job's only in a periodic pass;
* its begin time (``--begin``): Slurm's EligibleTime of a job that never ran, while it
  is in the future. (A requeued job's EligibleTime is Slurm's own delay before a
  relaunch, requeue + 121 s, which the daemon's placement deliberately skips; a job
  that ran once was past its begin time.) The placement's ``StartTime=now`` is never
  sent for such a job, so the begin time its user set is kept;
* its deadline (``--deadline``), once passed: Slurm would end the job the moment it
  started it (deadline_passed);
* a limit only Slurm knows (a partition's MaxTime, a QOS or association limit, a
  reservation, a down partition): Slurm names it as the Reason of a job it was free to
  start (released, not held) and did not. Such a job is held again (it was not
  placed this round) and kept out for LIMIT_RECHECK_S before the daemon tries it
  again: while it is held, Slurm shows the hold, not the limit.

A fourth, the user's own hold (user_hold_reason), is read from the job's comment by
view.build_view: Slurm shows the daemon's hold and the user's alike (JobHeldUser).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping

from slurm_gavel.backends.slurm.records import RUNNING_STATES, WAITING_STATES, SlurmJob
from slurm_gavel.domain.model import JobId

# Reasons Slurm gives a pending job that it will not start whatever nodes it is put on
# (squeue's %r; Slurm's job_state_reason names). Resources, Priority and the like are
# not here: those a placement answers, nor ReqNodeNotAvail and BadConstraints, which
# name the nodes the daemon chose for it.
BLOCKING_REASONS = frozenset(
    {
        "AccountNotAllowed",
        "BeginTime",
        "Dependency",
        "DependencyNeverSatisfied",
        "InvalidAccount",
        "InvalidQOS",
        "PartitionConfig",
        "PartitionDown",
        "PartitionInactive",
        "PartitionNodeLimit",
        "PartitionTimeLimit",
        "QOSNotAllowed",
        "Reservation",
        "ReservationDeleted",
    }
)
# ...and the families of limits: AssocGrpGRES, AssocMaxWallDurationPerJobLimit,
# QOSMaxGRESPerUser, QOSGrpCpuLimit, ... (dozens, all named by these prefixes).
BLOCKING_PREFIXES = ("Assoc", "QOS", "MaxGRES", "MaxTRES")

# How long a job Slurm held back for a limit stays out before the daemon tries again.
LIMIT_RECHECK_S = 300.0


def limit_reason(sj: SlurmJob) -> str | None:
    """The limit Slurm names for a job it was free to start and did not (released,
    not held, pending), or None."""
    if sj.state != "PENDING" or sj.held:
        return None
    reason = sj.reason
    if reason in BLOCKING_REASONS or reason.startswith(BLOCKING_PREFIXES):
        return reason
    return None


def waiting_on(
    sj: SlurmJob, now: float, held_back: Mapping[JobId, str], singleton_ok: bool = False
) -> str | None:
    """Why Slurm would not start this waiting job now (see the module notes), or None.
    held_back: jobs a recent round found blocked by a limit (HeldBack.reasons(now)).
    singleton_ok: no job blocks its --dependency=singleton now (singleton_free)."""
    if deadline_passed(sj, now):
        return expired(sj)
    dep = sj.dependency
    if dep and "(failed)" in dep:
        return f"its dependency {dep} can never be satisfied (cancel it or change it)"
    if dep and "(unfulfilled)" in dep and not (dep == SINGLETON and singleton_ok):
        return f"it waits for its dependency {dep}"
    if sj.restarts == 0 and sj.eligible_time > now:
        when = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(sj.eligible_time))
        return f"its begin time {when} has not come"
    limit = limit_reason(sj)
    if limit is not None:
        return f"Slurm holds it back ({limit})"
    if sj.job_id in held_back:
        return f"Slurm held it back ({held_back[sj.job_id]}); tried again shortly"
    return None


# A dependency on nothing but --dependency=singleton, as squeue prints it while it waits.
SINGLETON = "singleton(unfulfilled)"
# The states in which a job of the same user and name blocks a singleton whatever its
# id (Slurm's IS_JOB_RUNNING or suspended; a COMPLETING job's base state is COMPLETED).
_SINGLETON_RUNNING = frozenset(RUNNING_STATES - {"COMPLETING"})


def singleton_free(sj: SlurmJob, jobs: Iterable[SlurmJob]) -> bool:
    """Whether nothing blocks the job's --dependency=singleton now, by Slurm's rule: no
    other job of its user and name runs (or is suspended), nor waits with a lower id.

    Slurm re-tests the dependency of a held job only in a periodic pass (30 s and more
    after the job ahead of it ended, measured on 22.05), while a released job's is
    tested as it is scheduled (it started ~1 s after its release): the daemon reads the
    singleton itself, so a chain of singleton jobs runs without a minute's gap per link.
    A job whose name or owner the daemon cannot tell is not free; a wrong "free" costs
    one round (Slurm leaves the released job pending, reason Dependency: held again)."""
    if not sj.name or sj.user_id is None:
        return False
    me = _number(sj.job_id)
    for other in jobs:
        if other.job_id == sj.job_id or other.user_id != sj.user_id or other.name != sj.name:
            continue
        if other.state in _SINGLETON_RUNNING:
            return False
        if other.state in WAITING_STATES and _number(other.job_id) < me:
            return False
    return True


def _number(job_id: str) -> int:
    """A job id's number (an array task "28_3": its array's, 28)."""
    head = job_id.partition("_")[0]
    return int(head) if head.isdigit() else 0


def deadline_passed(sj: SlurmJob, now: float) -> bool:
    """Its --deadline has come: Slurm ends the job (DEADLINE) the moment it could start
    it, so GPUs given to it would sit idle for the round. Slurm leaves a held job
    pending past its deadline, so the daemon gives such a job back to Slurm
    (giveback.refused_held), which ends it as it would have without the scheduler."""
    return 0 < sj.deadline <= now


def expired(sj: SlurmJob) -> str:
    when = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(sj.deadline))
    return f"its --deadline {when} has passed: Slurm ends it (DEADLINE)"


def user_hold_reason(job_id: JobId) -> str:
    """ObservedJob.waiting_on of a job its owner holds (hold=user in its comment, written
    by job_submit.lua for `sbatch --hold` and the owner's `scontrol hold`/`uhold`): the
    daemon never places it, whatever else would let it run, until the owner's release
    removes the key."""
    return f"held by you: `scontrol release {job_id}` hands it back to the scheduler"


class HeldBack:
    """The jobs Slurm held back for a limit, each until its recheck time: owned by
    SlurmBackend, fed every observe."""

    def __init__(self, recheck_s: float = LIMIT_RECHECK_S) -> None:
        self.recheck_s = recheck_s
        self._until: dict[JobId, tuple[str, float]] = {}

    def observe(self, managed: Mapping[JobId, SlurmJob], now: float) -> None:
        for job_id, sj in managed.items():
            limit = limit_reason(sj)
            if limit is not None and limit not in ("Dependency", "BeginTime"):
                self._until[job_id] = (limit, now + self.recheck_s)
        self._until = {
            j: (why, until)
            for j, (why, until) in self._until.items()
            if until > now and j in managed and managed[j].state == "PENDING"
        }

    def reasons(self, now: float) -> dict[JobId, str]:
        """The jobs still kept out at `now` (their recheck time not reached), -> why."""
        return {j: why for j, (why, until) in self._until.items() if until > now}
