"""salloc and srun with the plugin's options are refused in the client, before anything
reaches slurmctld, with the reason (an interactive job has no batch script to
checkpoint and requeue, so the daemon could never preempt it); sbatch is unchanged and
srun inside a job starts a step as ever."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.slurm


@pytest.mark.parametrize("cmd", ["salloc", "srun"])
@pytest.mark.parametrize("option", ["--gavel", "--gavel-job-type=A3C"])
def test_an_interactive_job_with_the_option_is_refused_in_the_client(cluster, cmd, option):
    cluster.cancel_all()
    res = cluster.cmd(cmd, option, "-p", "gpu", "-t", "1", "true", check=False)
    assert res.returncode != 0, res.stderr
    assert "salloc and srun jobs cannot be managed" in res.stderr, res.stderr
    assert "slurm-gavel: job not submitted" in res.stderr  # the plugin, not the Lua
    assert cluster.cmd("squeue", "-h", "-o", "%i").stdout.split() == []


def test_sbatch_and_a_step_inside_a_managed_job_are_unchanged(cluster, tmp_path):
    cluster.cancel_all()
    out = tmp_path / "step.out"
    job = cluster.sbatch("--gavel", "-p", "gpu", "-o", str(out), "--wrap", "srun true; echo ok")
    assert cluster.show(job)["Priority"] == "0"  # held on arrival: a managed job
    cluster.cmd("scontrol", "release", job)
    cluster.wait_state(job, "COMPLETED", "GONE", timeout=60)
    assert out.read_text().strip().endswith("ok"), out.read_text()
