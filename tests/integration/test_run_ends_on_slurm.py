"""A crash loop under `slurm-gavel run` itself (the daemon as an admin runs it, its
config's defaults): a managed script that exits 99 at every start is restarted three
times (checkpoint.max_unsignalled_restarts), then given back to Slurm with the reason
its owner sees, logged once and counted; a well-behaved job beside it runs to its end.
The unit of it over a Daemon object: tests/daemon/test_run_watch_on_slurm.py."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

pytestmark = pytest.mark.slurm

JOB_TYPE = "ResNet-18 (batch size 64)"


def comment(slurm, job: str) -> str:  # type: ignore[no-untyped-def]
    return str(slurm.cmd("squeue", "-h", "-t", "all", "-j", job, "-o", "%k").stdout.strip())


def test_a_crash_loop_is_given_back_not_restarted_forever(scenario):
    sc, slurm = scenario, scenario.slurm
    slurm.cancel_all()
    crash = slurm.sbatch("-p", "gpu", "-o", "/dev/null", f"--comment=gavel:type={JOB_TYPE}",
                         "--wrap", "exit 99")  # fmt: skip
    good = sc.submit(JOB_TYPE, 4)
    sc.daemon.start()
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if comment(slurm, crash).startswith("gavel-released:"):
            break
        time.sleep(1)
    said = comment(slurm, crash)
    assert said.startswith("gavel-released: crash loop: its last 3 runs ended without the "
                           "checkpoint signal"), (said, slurm.why(crash))  # fmt: skip
    states = sc.wait_finished([good], timeout=60)
    assert states[good] == "COMPLETED", slurm.why(good)
    time.sleep(10)  # more rounds: the daemon leaves the given-back job alone
    info = slurm.show(crash)
    assert info["Restarts"] == "3" and info["JobState"] == "PENDING", slurm.why(crash)
    assert info["Priority"] != "0"  # released to Slurm's own scheduling, never cancelled
    assert [e["job"] for e in sc.daemon.events("crash_loop")] == [crash]
    assert crash in {e["job"] for e in sc.daemon.events("job_given_back")}
    assert sc.metrics()['slurm_gavel_jobs_given_back_total{why="crash_loop"}'] == 1
    assert sc.metrics()['slurm_gavel_run_ends_total{kind="unsignalled"}'] == 3
    out = subprocess.run(
        [sys.executable, "-m", "slurm_gavel", "explain", crash, "--config",
         str(sc.daemon.config)], capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert out.returncode == 0 and "crash loop" in out.stdout, out.stderr
    assert sc.daemon.events("round_failed") == []
