"""Only what Slurm would start is given GPUs, on the fake Slurm: a managed job waiting
on a dependency or a begin time is seen so, never placed (no command names it, so the
user's begin time is kept), and placeable once Slurm cleared its dependency, which for
a held job happens only at Slurm's periodic scheduling pass (sched_interval), not when
the job it waits on ends.

What Slurm does that this leans on is pinned on 22.05, 24.11 and 26.05 by the contract
scenario dependency (`afterok:JOB(unfulfilled)` while JOB runs, cleared once it has
completed, for a held job at the periodic pass; a `--begin` in the future is an
EligibleTime later). Both transports' reading of such a job stays on real Slurm
(test_eligibility_on_slurm.py), with the limit Slurm holds a released job back for."""

from __future__ import annotations

from slurm_gavel.core.skips import WAITING_ON_CLUSTER
from slurm_gavel.domain.cluster_model import JobPlacement, NodeSlice, RoundPlacement
from slurm_gavel.testing import FakeSlurm, Script, fake_backend


def placed(round_index: int, jobs: dict[str, str]) -> RoundPlacement:
    """Each job on one GPU of the node named."""
    return RoundPlacement(
        round_index,
        0.0,
        {j: JobPlacement(j, node.split("-")[0], (NodeSlice(node, 1),)) for j, node in jobs.items()},
    )


def waits(cluster, job: str) -> str | None:  # type: ignore[no-untyped-def]
    (obs,) = [o for o in cluster.observe().jobs if o.job.id == job]
    return obs.waiting_on


def test_a_dependency_or_a_begin_time_keeps_a_job_off_the_gpus():
    slurm = FakeSlurm()
    blocker = slurm.submit(partition="k80", gres="gpu:k80:1", script=Script(runs_s=90))
    after = slurm.submit("gavel:type=A3C", dependency=f"afterok:{blocker}")
    later = slurm.submit("gavel:type=A3C", begin=slurm.clock() + 3600)
    ready = slurm.submit("gavel:type=A3C")
    slurm.advance(1)
    assert slurm.job(blocker).state == "RUNNING"
    begins = slurm.job(later).eligible_time
    cluster = fake_backend(slurm)
    assert f"afterok:{blocker}" in str(waits(cluster, after))
    assert "begin time" in str(waits(cluster, later))
    assert waits(cluster, ready) is None
    res = cluster.act(placed(0, {after: "v100-1", later: "v100-1", ready: "v100-2"}))
    assert res.started == (ready,), res
    failed = dict(res.failed)
    assert failed[after].startswith(WAITING_ON_CLUSTER) and "afterok" in failed[after]
    assert failed[later].startswith(WAITING_ON_CLUSTER)
    named = {j for _, ids in cluster.transport.acts() for j in ids}
    assert named == {ready}  # the waiting jobs are not touched at all
    slurm.advance(1)
    assert slurm.job(ready).state == "RUNNING"
    for job in (after, later):
        assert slurm.job(job).held  # still held: not placed
    assert slurm.job(later).eligible_time == begins  # the user's --begin is kept
    # the blocker completes; the held job's dependency is cleared at the next periodic
    # pass (sched_interval, 60 s by default), not at once
    exit_at = slurm.job(blocker).exit_at
    assert exit_at is not None
    slurm.advance(exit_at - slurm.clock())
    assert slurm.job(blocker).state == "COMPLETED"
    cleared_by = slurm.scheduler.next_periodic
    assert f"afterok:{blocker}" in str(waits(cluster, after))
    slurm.advance(cleared_by - slurm.clock())
    assert waits(cluster, after) is None
    res = cluster.act(placed(1, {after: "v100-1", ready: "v100-2"}))
    assert res.started == (after,) and res.kept == (ready,), res
    slurm.advance(1)
    assert slurm.job(after).state == "RUNNING"
