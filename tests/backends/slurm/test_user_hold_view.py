"""A job its owner holds (hold=user in its comment, written by job_submit.lua for
`sbatch --hold` and the owner's `scontrol hold`/`uhold`: tests/test_user_hold_on_slurm.py)
waits on its owner: the view says so, the round gives it no GPUs and no
fairness credit (ObservedJob.waiting_on), the act never releases it. Slurm shows the
daemon's hold and the user's alike (JobHeldUser, priority 0): only the key differs."""

from __future__ import annotations

from dataclasses import replace

import pytest

from slurm_gavel.backends.slurm.act_plan import plan_act
from slurm_gavel.backends.slurm.records import SlurmJob, SlurmNode
from slurm_gavel.backends.slurm.view import build_view
from slurm_gavel.core.skips import WAITING_ON_CLUSTER
from slurm_gavel.daemon.status_view import why
from slurm_gavel.domain.cluster_model import JobPlacement, JobState, NodeSlice, RoundPlacement

NOW = 10_000.0


def job(job_id: str, comment: str, **over: object) -> SlurmJob:
    sj = SlurmJob(
        job_id=job_id, state="PENDING", reason="JobHeldUser", comment=comment,
        partitions=("gpu",), nodes=(), gpu_request=("v100", 1), gpu_slices=(), node_count=1,
        priority=0, restarts=0, submit_time=0, start_time=0, end_time=0, exit_code=None,
        account="", user="u",
    )  # fmt: skip
    return replace(sj, **over)  # type: ignore[arg-type]


def view_of(*jobs: SlurmJob):  # type: ignore[no-untyped-def]
    node = SlurmNode("v100-1", "idle", frozenset(), "v100", 4, 0, ("gpu",), "", 1)
    return build_view([node], list(jobs), None, NOW)


def test_a_job_its_owner_holds_waits_on_its_owner_and_is_never_released():
    mine = job("7", "gavel:type=A3C,hold=user")
    requeued = job("8", "gavel:hold=user,type=A3C", restarts=2, state="PENDING")
    daemons = job("9", "gavel:type=A3C")  # the arrival hold: the daemon's to lift
    v = view_of(mine, requeued, daemons)
    by_id = {o.job.id: o for o in v.snapshot.jobs}
    assert by_id["7"].waiting_on == (
        "held by you: `scontrol release 7` hands it back to the scheduler"
    )
    assert by_id["8"].waiting_on is not None and "scontrol release 8" in by_id["8"].waiting_on
    assert by_id["9"].waiting_on is None
    slices = (NodeSlice("v100-1", 1),)
    placement = RoundPlacement(
        0, NOW, {j: JobPlacement(j, "v100", slices) for j in ("7", "8", "9")}
    )
    plan = plan_act(placement, v, None)
    assert [o.job_id for o in plan.starts] == ["9"]
    assert dict(plan.failed)["7"] == WAITING_ON_CLUSTER + str(by_id["7"].waiting_on)
    # what `status` and `explain` tell the owner
    doc = {"state": "skipped", "skip": "waiting_on_cluster", "reason": dict(plan.failed)["7"],
           "allocation": {}}  # fmt: skip
    told = why({**doc, "paired_allocation": {}}, "max_min_fairness")
    assert told.startswith("not scheduled: ") and "held by you: `scontrol release 7`" in told


def test_a_running_job_whose_owner_held_it_keeps_running():
    # Slurm keeps a running job running whatever its priority; the key holds it once
    # it is requeued (preempted, or the owner's requeuehold)
    run = job("7", "gavel:type=A3C,hold=user", state="RUNNING", reason="None", priority=0)
    o = view_of(run).snapshot.jobs[0]
    assert o.state is JobState.RUNNING and o.waiting_on is None


@pytest.mark.hostile
@pytest.mark.parametrize(
    "comment",
    ["gavel:type=A3C,hold=admin", "gavel:type=A3C,hold=user,hold=user", "gavel:type=A3C,hold="],
)
def test_a_malformed_hold_key_leaves_the_job_unmanaged_with_a_warning(comment: str):
    v = view_of(job("7", comment))
    assert v.snapshot.jobs == () and any("hold" in w for w in v.warnings), v.warnings
