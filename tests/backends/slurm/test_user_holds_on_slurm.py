"""The owner's `scontrol requeuehold` of a running managed job is the owner's hold,
through slurmrestd (the REST transport) on each release: Slurm calls no job_submit hook
for a requeue and shows it as it shows the daemon's own preemption, so the backend
tells them apart by who stopped the run (backends/slurm/user_holds.py), marks it
hold=user, and never places it again until the owner's `scontrol release` (which the
Lua turns into the removal of the key: tests/test_user_hold_on_slurm.py). The daemon's
own preemption of a job stays the daemon's. A job its owner holds, given back to
Slurm, stays held for its owner.

The same round through the CLI transport runs on the fake Slurm
(test_user_holds_on_fake.py); what Slurm and the Lua do there is pinned on each
release by the contract scenario owner_holds."""

from __future__ import annotations

import pytest

from slurm_gavel.backends.slurm.backend import SlurmBackend
from slurm_gavel.backends.slurm.cli.transport import cli_backend
from slurm_gavel.backends.slurm.rest.transport import rest_backend
from slurm_gavel.domain.cluster_model import JobPlacement, NodeSlice, RoundPlacement
from slurm_gavel_dev.localcluster_rest import rest_up

pytestmark = pytest.mark.slurm


def build(slurm, backend: str) -> SlurmBackend:  # type: ignore[no-untyped-def]
    if backend == "rest":
        return rest_backend(rest_up(slurm.run_dir), env=slurm.env, poll_s=0.2, grace_s=1.0,
                            fresh_run_s=0.0)  # fmt: skip
    return cli_backend(env=slurm.env, poll_s=0.2, grace_s=1.0, fresh_run_s=0.0)


def placement(round_index: int, jobs: list[str]) -> RoundPlacement:
    on = {j: JobPlacement(j, "v100", (NodeSlice(f"v100-{i + 1}", 1),)) for i, j in enumerate(jobs)}
    return RoundPlacement(round_index, 0.0, on)


def submit(slurm, script: str) -> str:  # type: ignore[no-untyped-def]
    res = slurm.as_user("nobody", "sbatch", "--parsable", "-D", "/tmp", "-o", "/dev/null",
                        "-p", "gpu", "--comment=gavel:type=A3C", "--wrap", script)  # fmt: skip
    assert res.returncode == 0, res.stderr
    return str(res.stdout.strip().split(";")[0])


def test_the_owners_requeuehold_is_theirs_and_the_daemons_preemption_is_not(slurm):
    slurm.cancel_all()
    cluster = build(slurm, "rest")
    mine = submit(slurm, "sleep 300")
    preempted = submit(slurm, "trap 'exit 99' USR1; sleep 300 & wait")
    cluster.observe()
    cluster.act(placement(0, [mine, preempted]))
    for j in (mine, preempted):
        slurm.wait_state(j, "RUNNING")
    cluster.observe()  # both seen running
    res = slurm.as_user("nobody", "scontrol", "requeuehold", mine)
    assert res.returncode == 0, res.stderr
    cluster.act(placement(1, [mine]))  # the daemon preempts the other one itself
    slurm.wait_state(mine, "PENDING", timeout=60)
    slurm.wait_state(preempted, "PENDING", "SPECIAL_EXIT", timeout=60)
    obs = {o.job.id: o for o in cluster.observe().jobs}
    assert slurm.show(mine)["Comment"] == "gavel:type=A3C,hold=user", slurm.why(mine)
    assert slurm.show(preempted)["Comment"] == "gavel:type=A3C"
    assert obs[mine].waiting_on is not None and "held by you" in obs[mine].waiting_on
    assert obs[preempted].waiting_on is None
    # placed again: the daemon's preempted job starts, the owner's stays held
    res2 = cluster.act(placement(2, [mine, preempted]))
    assert mine in dict(res2.failed), res2
    slurm.wait_state(preempted, "RUNNING", timeout=60)
    assert slurm.state(mine) == "PENDING" and slurm.show(mine)["Priority"] == "0"
    # a release by the daemon's transport itself (a daemon that read the job before its
    # owner held it) is refused by job_submit.lua, through slurmrestd as through scontrol
    # (the contract scenario owner_holds)
    failed: dict[str, str] = {}
    cluster.transport.release([mine], failed)
    assert mine in failed and slurm.show(mine)["Priority"] == "0", slurm.why(mine)
    # the owner's release hands it back; the next round places it
    res = slurm.as_user("nobody", "scontrol", "release", mine)
    assert res.returncode == 0, res.stderr
    assert cluster.observe() and cluster.view is not None
    assert next(o for o in cluster.view.snapshot.jobs if o.job.id == mine).waiting_on is None
    slurm.cancel_all()


def test_a_job_its_owner_holds_given_back_to_slurm_stays_held_for_its_owner(slurm):
    """A held job the daemon gives back (its partition moved out of the managed ones,
    its type unknown: giveback.py) becomes a plain job; one its owner holds is not
    released with it: its owner releases it, now as any plain job."""
    slurm.cancel_all()
    cluster = build(slurm, "cli")
    held = submit(slurm, "sleep 60")
    res = slurm.as_user("nobody", "scontrol", "uhold", held)
    assert res.returncode == 0, res.stderr
    cluster.observe()
    assert cluster.give_back({held: "partition debug is not managed"}) == {}
    info = slurm.show(held)
    assert info["Comment"].startswith("gavel-released:") and info["Priority"] == "0", info
    res = slurm.as_user("nobody", "scontrol", "release", held)
    assert res.returncode == 0, res.stderr
    assert slurm.show(held)["Priority"] != "0"
    slurm.cancel_all()
