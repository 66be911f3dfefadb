"""conf/slurm/job_submit.lua on the real local cluster: managed jobs are held on
arrival with their GPU request moved into the comment; users cannot release them."""

from __future__ import annotations

import pwd
import shutil
import subprocess

import pytest

pytestmark = pytest.mark.slurm


def test_managed_job_is_held_and_its_gpu_request_becomes_the_scale(slurm):
    job = slurm.sbatch(
        "--comment=gavel:type=A3C",
        "-p",
        "gpu",
        "-N",
        "2",
        "--gres=gpu:2",
        "-o",
        "/dev/null",
        "--wrap",
        "true",
    )
    info = slurm.show(job)
    assert info["JobState"] == "PENDING" and info["Priority"] == "0"
    assert info["Comment"] == "gavel:type=A3C,scale=4"  # 2 nodes x 2 GPUs
    assert info.get("TresPerNode", "") in ("", "gres:")  # the daemon sets it when placing
    plain = slurm.sbatch("-p", "k80", "--gres=gpu:k80:1", "-o", "/dev/null", "--wrap", "true")
    assert slurm.show(plain)["Priority"] != "0"


def test_comment_without_type_is_held_with_the_gpu_count_moved_in(slurm):
    # the type is an optional hint; "gavel:" alone is a managed job, and the
    # GPU request moved into it keeps the comment in the grammar (no leading comma)
    job = slurm.sbatch(
        "--comment=gavel:", "-p", "gpu", "--gres=gpu:2", "-o", "/dev/null", "--wrap", "true"
    )
    info = slurm.show(job)
    assert info["Priority"] == "0" and info["Comment"] == "gavel:scale=2"
    res = slurm.cmd("sbatch", "--comment=gavel:,", "-p", "gpu", "--wrap", "true", check=False)
    assert res.returncode != 0 and "is not key=value" in res.stderr


def test_users_cannot_release_or_relabel_managed_jobs(slurm):
    runuser = shutil.which("runuser")
    try:
        pwd.getpwnam("nobody")
    except KeyError:
        runuser = None
    if runuser is None:
        pytest.skip("no runuser or no user 'nobody' to submit as")

    def as_nobody(*argv: str) -> subprocess.CompletedProcess[str]:
        return slurm.as_user("nobody", *argv)  # runuser, or into a chroot release

    sub = as_nobody(
        "sbatch",
        "--parsable",
        "-D",
        "/tmp",
        "-o",
        "/dev/null",
        "--comment=gavel:type=A3C",
        "-p",
        "gpu",
        "--wrap",
        "sleep 60",
    )
    assert sub.returncode == 0, sub.stderr
    job = sub.stdout.strip()
    assert as_nobody("scontrol", "release", job).returncode != 0
    assert as_nobody("scontrol", "update", f"JobId={job}", "Comment=mine").returncode != 0
    assert as_nobody("scontrol", "update", f"JobId={job}", "TimeLimit=5").returncode == 0
    info = slurm.show(job)
    assert info["Priority"] == "0" and info["Comment"] == "gavel:type=A3C"
    slurm.cmd("scontrol", "release", job)  # root (the daemon) may
    assert slurm.show(job)["Priority"] != "0"
