"""A held managed job its owner moves to a partition the daemon does not manage is given
back to Slurm as a plain job, with the reason in its comment (it was stranded
there, held forever), on the real cluster of each release."""

from __future__ import annotations

import time

import pytest

from slurm_gavel.backends.slurm.cli.transport import cli_backend
from slurm_gavel.domain.comment_grammar import classify

pytestmark = pytest.mark.slurm


def comment(slurm, job: str) -> str:
    return slurm.cmd("squeue", "-h", "-j", job, "-o", "%k").stdout.strip()


def test_a_held_job_moved_out_of_the_managed_partitions_runs_there_as_a_plain_job(slurm):
    slurm.cancel_all()
    job = slurm.sbatch_as("nobody", "--gpus=1", "--comment=gavel:type=A3C", "--wrap", "sleep 300")
    stays = slurm.sbatch("-p", "gpu", "--comment=gavel:type=A3C", "-o", "/dev/null",
                         "--wrap", "sleep 300")  # fmt: skip
    deadline = time.monotonic() + 20
    while True:  # 26.05 answers EAGAIN right after the submit, for a moment
        moved = slurm.as_user("nobody", "scontrol", "update", f"JobId={job}", "Partition=k80")
        if "temporarily unavailable" not in moved.stderr or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert moved.returncode == 0, moved.stderr  # the Lua lets an owner move a held job
    cluster = cli_backend(env=slurm.env, managed_partitions=["gpu"])
    snap = cluster.observe()
    assert job not in {o.job.id for o in snap.jobs}  # not scheduled there
    assert set(cluster.refused_held) == {job}, cluster.refused_held  # `stays` is not
    assert "partition k80 is not managed by the gavel scheduler" in cluster.refused_held[job]
    assert cluster.give_back(cluster.refused_held) == {}
    slurm.wait_state(job, "RUNNING")  # Slurm's own now, in k80
    text = comment(slurm, job)
    assert text.startswith("gavel-released: partition k80 is not managed"), text
    assert classify(text) == "plain"  # no enforcer claims it again
    info = slurm.show(job)
    assert info["Partition"] == "k80" and "gpu:1" in info.get("TresPerNode", ""), info
    assert slurm.show(stays)["Priority"] == "0"  # the managed partition's job: still held
    cluster.observe()
    assert cluster.refused_held == {}  # once, not again
    slurm.cancel_all()
