"""A managed job's output is kept across preemptions (the plugin on the real local
cluster): every run opens the job's output files again, and Slurm's default
(JobFileAppend=0) truncates them, so a job preempted three times kept only its last
run's output. The plugin submits managed sbatch jobs (--gavel, or a hand-written
--comment=gavel:) with --open-mode=append unless their owner chose a mode;
job_submit.lua cannot, as Slurm's Lua does not expose the open mode. Root plays the
daemon: release, the job's exit 99 requeues it held (RequeueExitHold), release again."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slurm

# Run 0 stops as a preempted job does (exit 99: requeued, held); run 1 finishes.
JOB = """#!/bin/bash
echo "run ${SLURM_RESTART_COUNT:-0}"
[ "${SLURM_RESTART_COUNT:-0}" -ge 1 ] && exit 0
exit 99
"""


def _two_runs(slurm, folder: Path, *options: str, directive: str = "") -> str:  # type: ignore[no-untyped-def]
    """The job's output after two runs."""
    script = folder / "job.sh"
    script.write_text(JOB.replace("\n", f"\n{directive}\n", 1) if directive else JOB)
    job = slurm.sbatch("-D", str(folder), "-p", "gpu", *options, str(script))
    if slurm.show(job)["Priority"] == "0":  # managed: held until the daemon places it
        slurm.cmd("scontrol", "release", job)
    deadline = time.monotonic() + 60
    while slurm.show(job)["Restarts"] != "1" and time.monotonic() < deadline:
        time.sleep(0.2)
    assert slurm.show(job)["Restarts"] == "1", slurm.why(job)
    # never within the second Slurm requeued it (test_end_to_end.py says why)
    time.sleep(max(0.0, int(time.time()) + 1.05 - time.time()))
    slurm.cmd("scontrol", "release", job)
    slurm.cmd("scontrol", "update", f"JobId={job}", "StartTime=now")
    slurm.wait_state(job, "COMPLETED", timeout=60)
    return str((folder / f"slurm-{job}.out").read_text())


@pytest.mark.parametrize(
    "options",
    [["--gavel"], ["--gavel-job-type=A3C"], ["--comment=gavel:type=A3C"]],
    ids=["gavel", "typed", "comment"],
)
def test_a_managed_job_keeps_every_runs_output(cluster, tmp_path, options) -> None:
    assert _two_runs(cluster, tmp_path, *options) == "run 0\nrun 1\n"


def test_a_mode_the_owner_chose_is_kept(cluster, tmp_path) -> None:
    assert _two_runs(cluster, tmp_path, "--gavel", "--open-mode=truncate") == "run 1\n"
    directive = "#SBATCH --open-mode=truncate"
    assert _two_runs(cluster, tmp_path, "--gavel", directive=directive) == "run 1\n"


def test_a_plain_job_keeps_slurms_default(cluster, tmp_path) -> None:
    assert _two_runs(cluster, tmp_path) == "run 1\n"
