"""Only what Slurm would start is given GPUs, on the real cluster of each release: a
managed job waiting on a dependency or a begin time is read so through the CLI and
through slurmrestd; one Slurm holds back for a limit is seen so once released, held
again and kept out for a while.

That such a job is never placed, keeps its begin time, and is placed once Slurm
cleared its dependency (for a held job, at Slurm's periodic pass) runs on the fake Slurm
(test_eligibility_on_fake.py); what Slurm does there is pinned on each release by the
contract scenario dependency."""

from __future__ import annotations

import time

import pytest

from slurm_gavel.backends.slurm.cli.transport import cli_backend
from slurm_gavel.backends.slurm.rest.transport import rest_backend
from slurm_gavel.domain.cluster_model import JobPlacement, NodeSlice, RoundPlacement
from slurm_gavel_dev.localcluster_rest import rest_up

pytestmark = pytest.mark.slurm

OUT = ("-o", "/dev/null")
MANAGED = ("--comment=gavel:type=A3C", "-p", "gpu", *OUT)


def placed(round_index: int, jobs: dict[str, str]) -> RoundPlacement:
    """Each job on one GPU of the node named."""
    return RoundPlacement(
        round_index,
        time.time(),
        {j: JobPlacement(j, node.split("-")[0], (NodeSlice(node, 1),)) for j, node in jobs.items()},
    )


def waits(cluster, job: str) -> str | None:
    snap = cluster.observe()
    (obs,) = [o for o in snap.jobs if o.job.id == job]
    return obs.waiting_on


def test_both_transports_read_a_dependency_and_a_begin_time(slurm):
    slurm.cancel_all()
    blocker = slurm.sbatch("-p", "k80", "--gres=gpu:k80:1", *OUT, "--wrap", "sleep 300")
    after = slurm.sbatch(*MANAGED, f"--dependency=afterany:{blocker}", "--wrap", "sleep 300")
    later = slurm.sbatch(*MANAGED, "--begin=now+3600", "--wrap", "sleep 300")
    ready = slurm.sbatch(*MANAGED, "--wrap", "sleep 300")
    slurm.wait_state(blocker, "RUNNING")
    for cluster in (
        cli_backend(env=slurm.env),
        rest_backend(rest_up(slurm.run_dir), env=slurm.env),
    ):
        assert f"afterany:{blocker}" in str(waits(cluster, after)), type(cluster.transport)
        assert "begin time" in str(waits(cluster, later))
        assert waits(cluster, ready) is None
    slurm.cancel_all()


def test_a_job_slurm_holds_back_for_a_limit_is_held_again_and_kept_out(slurm):
    slurm.cancel_all()
    slurm.cmd("scontrol", "update", "PartitionName=gpu", "MaxTime=1")
    try:
        too_long = slurm.sbatch(*MANAGED, "--time=10", "--wrap", "sleep 300")
        cluster = cli_backend(env=slurm.env)
        assert waits(cluster, too_long) is None  # held: Slurm names no limit yet
        res = cluster.act(placed(0, {too_long: "v100-1"}))
        assert res.started == (too_long,), res  # placed and released
        deadline = time.time() + 20
        reason = ""
        while time.time() < deadline:
            reason = slurm.show(too_long).get("Reason", "")
            if reason == "PartitionTimeLimit":
                break
            time.sleep(0.5)
        assert reason == "PartitionTimeLimit", slurm.why(too_long)
        assert "PartitionTimeLimit" in str(waits(cluster, too_long))
        res = cluster.act(RoundPlacement(1, time.time(), {}))  # the round skips it
        assert slurm.show(too_long)["Priority"] == "0", slurm.why(too_long)  # held again
        kept_out = waits(cluster, too_long)  # the hold hides the limit; it stays out
        assert kept_out is not None and "PartitionTimeLimit" in kept_out, kept_out
    finally:
        slurm.cmd("scontrol", "update", "PartitionName=gpu", "MaxTime=UNLIMITED")
        slurm.cancel_all()
