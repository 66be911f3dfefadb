"""End to end on the local Slurm cluster with a real PyTorch workload (the LM, tiny):
submit with the plugin -> held -> release -> running -> SIGUSR1 to the batch shell ->
checkpoint -> exit 99 -> Slurm holds it (RequeueExitHold) -> release -> it resumes
from the checkpoint (SLURM_RESTART_COUNT=1) and finishes."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from running import run_ok
from spank_build import REPO, ensure_built
from waiting import wait_for

from slurm_gavel.job import read_report
from slurm_gavel.job.progress import report_path

pytestmark = [pytest.mark.slurm, pytest.mark.torch, pytest.mark.slow]
TOTAL = 60


def test_preempt_checkpoint_requeue_hold_release_resume(slurm, tmp_path: Path) -> None:
    assert ensure_built() is None
    if not (REPO / ".venv" / "bin" / "python").exists():
        pytest.skip("no .venv: run tools/setup")
    progress, ckpt, out = tmp_path / "progress", tmp_path / "ck", tmp_path / "job.out"
    progress.mkdir()
    (progress / str(os.geteuid())).mkdir(mode=0o2750)  # the job's user's, as the daemon makes it
    env = {
        **os.environ,
        **slurm.env,
        "GAVEL_PROGRESS_DIR": str(progress),
        "GAVEL_PROGRESS_INTERVAL": "0",
    }
    gavel = [f"--gavel-steps={TOTAL}", f"--gavel-checkpoint-dir={ckpt}"]
    script = [str(REPO / "workloads" / "sbatch" / "lm.sbatch"), "--tiny", "--device", "cpu"]
    # ~6 s of steps: time to signal
    argv = ["sbatch", "--parsable", *gavel, "-o", str(out), *script, "--min-step-seconds", "0.1"]
    res = run_ok(argv, env=env, cwd=REPO, timeout=60)
    job = res.stdout.strip().split(";")[0]
    comment = slurm.cmd("squeue", "-h", "-j", job, "-o", "%k").stdout.strip()
    assert comment.startswith("gavel:type=LM (batch size 20),steps=60")
    assert slurm.state(job) == "PENDING"  # held until the daemon (here: we) release it

    slurm.cmd("scontrol", "release", job)
    report = report_path(progress, job)
    wait_for(lambda: (r := read_report(report)) and r["steps"] >= 3, 90, "3 steps reported", 0.2)
    slurm.cmd("scancel", "--signal=USR1", "--batch", job)
    first = wait_for(
        lambda: (r := read_report(report)) and r["state"] == "checkpointed" and r,
        90,
        "the checkpointed report",
        0.2,
    )
    assert first["steps"] < TOTAL and first["restart_count"] == 0

    # exit 99 -> requeued and held with one more restart; nothing was lost
    wait_for(
        lambda: (
            slurm.cmd("squeue", "-h", "-j", job, "-o", "%T %r").stdout.split()
            == ["SPECIAL_EXIT", "JobHeldUser"]
        ),
        90,
        "held after exit 99",
        0.2,
    )
    info = slurm.show(job)
    assert info["Restarts"] == "1" and info["ExitCode"].startswith("99")
    assert sorted(p.name for p in (ckpt / job).glob("ckpt-*.pt")) == [
        f"ckpt-{first['steps']:012d}.pt"
    ]

    # Not within the second Slurm requeued it: slurmd refuses a relaunch whose
    # credential carries the requeue's second ("Job credential revoked") and the job
    # ends FAILED. The daemon waits this out too (SlurmBackend._wait_out_requeue_second);
    # Slurm's own guard is the 121 s BeginTime that StartTime=now bypasses.
    time.sleep(max(0.0, int(time.time()) + 1.05 - time.time()))
    slurm.cmd("scontrol", "release", job)
    slurm.cmd("scontrol", "update", f"JobId={job}", "StartTime=now")
    try:
        final = wait_for(
            lambda: (r := read_report(report)) and r["state"] == "finished" and r,
            120,
            "the finished report",
            0.2,
        )
    except AssertionError as e:
        state = slurm.cmd("scontrol", "show", "job", job).stdout
        raise AssertionError(
            f"{e}\n{state}\njob output:\n{out.read_text() if out.exists() else '(none)'}"
        ) from None
    assert final["steps"] == TOTAL and final["restart_count"] == 1
    assert final["run_steps"] == TOTAL - first["steps"]
    slurm.wait_state(job, "COMPLETED", "GONE", timeout=60)
    log = out.read_text()
    assert "restart 0" in log and "restart 1" in log
    assert f"resumed from {ckpt / job}/ckpt-{first['steps']:012d}.pt" in log
    assert "exiting 99" in log
