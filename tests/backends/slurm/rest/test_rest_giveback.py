"""Held jobs the daemon cannot use go back to Slurm through slurmrestd too (the CLI
side and the daemon's: tests/daemon/test_giveback_on_slurm.py)."""

from __future__ import annotations

import pytest

from slurm_gavel.backends.slurm.rest.transport import rest_backend
from slurm_gavel_dev.localcluster_rest import rest_up

pytestmark = pytest.mark.slurm


@pytest.mark.hostile(guards="stranded")
def test_rest_gives_a_held_job_back_with_its_reason_and_gpus(slurm):
    sock = rest_up(slurm.run_dir)
    b = rest_backend(sock, env=slurm.env, poll_s=0.2, grace_s=10.0)
    job = slurm.sbatch(
        "--comment=gavel:type=A3C", "-p", "gpu", "--gres=gpu:2", "--begin=now+3600",
        "-o", "/dev/null", "--wrap", "true",
    )  # fmt: skip
    # a comment from before the Lua (root may set it): scale= is what the Lua wrote
    slurm.cmd("scontrol", "update", f"JobId={job}", "Comment=gavel:type=A3C,scale=2,weight=inf")
    b.observe()
    assert job in b.refused_held
    assert b.give_back({job: b.refused_held[job]}) == {}
    comment = slurm.cmd("squeue", "-h", "-t", "all", "-j", job, "-o", "%k").stdout.strip()
    assert comment.startswith("gavel-released: job ") and "weight=" in comment
    assert slurm.show(job)["Priority"] != "0"
    assert "gpu:2" in slurm.cmd("squeue", "-h", "-t", "all", "-j", job, "-o", "%b").stdout
