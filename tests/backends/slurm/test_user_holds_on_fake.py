"""The owner's `scontrol requeuehold` of a running managed job is the owner's hold, on
the fake Slurm: Slurm calls no job_submit hook for a requeue and shows it as it shows
the daemon's own preemption, so the backend tells them apart by who stopped the run
(backends/slurm/user_holds.py), marks it hold=user, and never places it again until
the owner's `scontrol release` (which the Lua turns into the removal of the key). The
daemon's own preemption of a job stays the daemon's.

What Slurm and the Lua do that this leans on is pinned on 22.05, 24.11 and 26.05 by
the contract scenarios owner_holds (the owner's requeuehold: requeued and held, the
comment unmarked; a job its owner holds: marked hold=user, the daemon's release
refused, the owner's release removes the key and leaves it held) and
requeue_hold_and_checkpoint (the daemon's checkpoint signal: exit 99, held). The REST
transport's side (its release refused by the Lua through slurmrestd) stays on real
Slurm (test_user_holds_on_slurm.py)."""

from __future__ import annotations

from slurm_gavel.domain.cluster_model import JobPlacement, NodeSlice, RoundPlacement
from slurm_gavel.testing import FakeSlurm, OnSignal, Script, fake_backend


def placement(round_index: int, jobs: list[str]) -> RoundPlacement:
    on = {j: JobPlacement(j, "v100", (NodeSlice(f"v100-{i + 1}", 1),)) for i, j in enumerate(jobs)}
    return RoundPlacement(round_index, 0.0, on)


def test_the_owners_requeuehold_is_theirs_and_the_daemons_preemption_is_not():
    slurm = FakeSlurm()
    cluster = fake_backend(slurm, grace_s=1.0, fresh_run_s=0.0)
    owner = {"user": "nobody", "user_id": 65534}
    mine = slurm.submit("gavel:type=A3C", script=Script(on_signal=OnSignal.IGNORE), **owner)
    preempted = slurm.submit("gavel:type=A3C", script=Script(), **owner)
    cluster.observe()
    cluster.act(placement(0, [mine, preempted]))
    slurm.advance(1)
    assert slurm.job(mine).state == slurm.job(preempted).state == "RUNNING"
    cluster.observe()  # both seen running
    slurm.owner.requeuehold(mine)
    cluster.act(placement(1, [mine]))  # the daemon preempts the other one itself
    assert slurm.job(mine).state == "PENDING"
    assert slurm.job(preempted).state == "SPECIAL_EXIT"
    obs = {o.job.id: o for o in cluster.observe().jobs}
    assert slurm.job(mine).comment == "gavel:type=A3C,hold=user"  # marked by the daemon
    assert slurm.job(preempted).comment == "gavel:type=A3C"
    assert obs[mine].waiting_on is not None and "held by you" in obs[mine].waiting_on
    assert obs[preempted].waiting_on is None
    slurm.advance(2)
    # placed again: the daemon's preempted job starts, the owner's stays held
    n = len(cluster.transport.acts())
    res2 = cluster.act(placement(2, [mine, preempted]))
    assert mine in dict(res2.failed) and res2.started == (preempted,), res2
    assert mine not in {j for _, ids in cluster.transport.acts()[n:] for j in ids}
    slurm.advance(1)
    assert slurm.job(preempted).state == "RUNNING"
    assert slurm.job(mine).state == "PENDING" and slurm.job(mine).held
    # a release by the daemon's transport itself (a daemon that read the job before its
    # owner held it) is refused by job_submit.lua
    failed: dict[str, str] = {}
    cluster.transport.release([mine], failed)
    assert mine in failed and slurm.job(mine).held
    # the owner's release hands it back; the next round places it
    slurm.owner.release(mine)
    cluster.observe()
    assert cluster.view is not None
    assert next(o for o in cluster.view.snapshot.jobs if o.job.id == mine).waiting_on is None
    res3 = cluster.act(placement(3, [mine, preempted]))
    assert res3.started == (mine,) and res3.kept == (preempted,), res3
