"""The owner's `scontrol requeuehold` of a running managed job, told apart from the
daemon's preemption. Pure.

job_submit.lua marks a user's hold with hold=user in the comment (`sbatch --hold`,
`scontrol hold`/`uhold`), but Slurm calls no job_submit hook for a requeue, and the
record of the owner's requeuehold is the record of the daemon's own at a grace end:
PENDING, JobHeldUser, priority 0, one more restart. What differs is who stopped the
run: the daemon stops a run only after signalling it (Preemption.signal), so a run
that left RUNNING for that held state without the daemon's signal was stopped by its
owner (or an admin), and the daemon writes the mark itself (a `DAEMON_UIDS` comment
update, which the Lua lets through) before the round can place the job. From then on
it is the user's hold like any other: only the owner's `scontrol release` lifts it.

Not told apart: a requeuehold the owner makes during the grace of the daemon's signal
(the daemon's), and one made while the daemon was down (the daemon did not see the
run end). The job's own exit 99 (RequeueExitHold: SPECIAL_EXIT) is never the owner's
hold: the job library exits so at the daemon's signal.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

from slurm_gavel.backends.slurm.giveback import GiveBack
from slurm_gavel.backends.slurm.records import RUNNING_STATES, SlurmJob
from slurm_gavel.domain.comment_grammar import ManagedCommentError, parse_comment
from slurm_gavel.domain.model import JobId

USER_HOLD = "hold=user"


def with_user_hold(comment: str) -> str:
    """The managed comment with hold=user added (job_submit.lua's with_user_hold)."""
    return comment + ("" if comment == "gavel:" else ",") + USER_HOLD


def held_by_owner(comment: str) -> bool:
    """Whether the comment is a managed one with hold=user (a comment the grammar
    refuses is not)."""
    try:
        spec = parse_comment(comment, max_weight=None)
    except ManagedCommentError:
        return False
    return spec is not None and spec.user_hold


def requeued_by_owner(
    before: Mapping[JobId, SlurmJob],
    now: Mapping[JobId, SlurmJob],
    stopped_by_daemon: Collection[JobId],
) -> list[GiveBack]:
    """The comment updates that mark as the user's the jobs whose run someone else than
    the daemon requeue-held since the last observe. before: the last observe's records;
    now: this one's managed jobs; stopped_by_daemon: the jobs the daemon signalled and
    has not yet seen waiting again."""
    out: list[GiveBack] = []
    for job_id, sj in now.items():
        prev = before.get(job_id)
        if prev is None or prev.state not in RUNNING_STATES or job_id in stopped_by_daemon:
            continue
        if sj.state != "PENDING" or sj.reason != "JobHeldUser" or sj.priority != 0:
            continue
        if sj.restarts <= prev.restarts:
            continue
        if sj.reading.spec is None or sj.reading.user_hold:
            continue
        marked = with_user_hold(sj.comment)
        try:
            parse_comment(marked, job_id=job_id, max_weight=None)
        except ManagedCommentError:
            continue  # no room for the key (256 bytes): left the daemon's, as before
        out.append(GiveBack(job_id, marked, None))
    return out
