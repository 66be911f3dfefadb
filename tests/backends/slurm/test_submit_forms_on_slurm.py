"""Submissions a managed job cannot be, refused at submit with the reason, on
the real cluster of each release, through conf/slurm/job_submit.lua as a plain user:
an interactive allocation (salloc, srun outside an allocation: no batch script, so the
daemon could never preempt it) and --no-requeue (the daemon preempts by requeueing).
The same options without the gavel comment are left to Slurm."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.slurm

MANAGED = "--comment=gavel:type=A3C"
SHORT = ("-p", "gpu", "-t", "1")


def test_interactive_jobs_with_the_option_are_refused_with_the_reason(slurm):
    slurm.cancel_all()
    for cmd in ("salloc", "srun"):
        res = slurm.as_user("nobody", cmd, MANAGED, *SHORT, "true")
        assert res.returncode != 0, (cmd, res.stdout, res.stderr)
        assert "salloc and srun jobs cannot be managed" in res.stderr, (cmd, res.stderr)
        assert "submit the work with sbatch" in res.stderr
    # nothing was queued, not even held
    queued = slurm.cmd("squeue", "-h", "-o", "%i").stdout.split()
    assert queued == [], [slurm.why(j) for j in queued]
    # without the option an interactive allocation is Slurm's own, as before
    plain = slurm.cmd("salloc", *SHORT, "true", check=False)
    assert plain.returncode == 0, plain.stderr


def test_no_requeue_is_refused_with_the_reason_not_overridden(slurm):
    slurm.cancel_all()
    res = slurm.as_user(
        "nobody", "sbatch", "--parsable", "--no-requeue", MANAGED, *SHORT,
        "-o", "/dev/null", "--wrap", "true",
    )  # fmt: skip
    assert res.returncode != 0, res.stdout  # today: accepted with Requeue=1
    assert "--no-requeue cannot be used with a gavel: job" in res.stderr, res.stderr
    assert "drop --no-requeue" in res.stderr
    # a managed job without it is held as ever; a plain --no-requeue job keeps it
    held = slurm.sbatch(MANAGED, *SHORT, "-o", "/dev/null", "--wrap", "true")
    assert slurm.show(held)["Priority"] == "0"
    plain = slurm.sbatch("--no-requeue", *SHORT, "-o", "/dev/null", "--begin=now+3600",
                         "--wrap", "true")  # fmt: skip
    assert slurm.show(plain)["Requeue"] == "0"
    slurm.cancel_all()
