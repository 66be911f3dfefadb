"""How runs end, on a real slurmctld of each release (daemon/run_watch.py over
backends/slurm/ended_runs.py), with jobs submitted by an unprivileged user: a script
that exits 99 at every start is given back to Slurm after N runs, not restarted
forever; a plain script with no handler, killed by its first checkpoint signal, is
told why in `explain`; a job that ignores the signal is warned, then given back.
The daemon never cancels a managed job: each stays in Slurm's queue or runs there."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from slurm_gavel.backends.slurm.cli.transport import cli_backend
from slurm_gavel.daemon.config import parse_config
from slurm_gavel.daemon.daemon import Daemon
from slurm_gavel.daemon.metrics import DaemonMetrics
from slurm_gavel.domain.cluster_model import RoundPlacement
from slurm_gavel.domain.throughputs import load_table

pytestmark = pytest.mark.slurm

OUT = ("-D", "/tmp", "-o", "/dev/null", "-p", "gpu", "--comment=gavel:type=A3C")


def submit(slurm, script: str) -> str:  # type: ignore[no-untyped-def]
    res = slurm.as_user("nobody", "sbatch", "--parsable", *OUT, "--wrap", script)
    assert res.returncode == 0, res.stderr
    return str(res.stdout.strip().split(";")[0])


def comment(slurm, job: str) -> str:  # type: ignore[no-untyped-def]
    """The whole comment (show() splits values at spaces)."""
    return str(slurm.cmd("squeue", "-h", "-t", "all", "-j", job, "-o", "%k").stdout.strip())


def daemon(slurm, tmp_path: Path, **checkpoint: Any) -> Daemon:  # type: ignore[no-untyped-def]
    cfg = parse_config({
        "partitions": ["gpu"], "round_seconds": 5, "state_dir": str(tmp_path / "state"),
        "status_privacy": "public",
        "checkpoint": {"grace_seconds": 3, **checkpoint},
    })  # fmt: skip
    backend = cli_backend(managed_partitions=cfg.partitions, env=slurm.env, grace_s=3.0,
                          poll_s=0.2)  # fmt: skip
    d = Daemon(cfg, backend, table=load_table(), metrics=DaemonMetrics())
    d.start()
    return d


def explain(d: Daemon, job: str) -> str:
    res = subprocess.run(
        [sys.executable, "-m", "slurm_gavel", "explain", job, "--state-dir", str(d.store.dir)],
        capture_output=True, text=True, env={**os.environ}, timeout=60,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    return res.stdout


def view(d: Daemon) -> dict[str, Any]:
    return json.loads((d.store.dir / "status.json").read_text())


def metric(d: Daemon, name: str, **labels: str) -> float:
    return d.metrics.registry.get_sample_value(name, labels) or 0.0


def running(slurm, job: str, timeout: float = 30.0) -> None:  # type: ignore[no-untyped-def]
    slurm.wait_state(job, "RUNNING", timeout=timeout)
    time.sleep(1.5)  # past its start second: its script is up


def preempt(d: Daemon) -> None:
    """The daemon's own checkpoint signal to every job it runs: its backend observes,
    then acts on a round that places nothing (SlurmBackend.act signals each running
    job); the next round's observe sees how each run ended."""
    d.backend.observe()
    d.backend.act(RoundPlacement(d.state.round_index, 0.0, {}))


def test_a_job_that_exits_99_at_every_start_is_given_back_after_three(slurm, tmp_path):
    slurm.cancel_all()
    job = submit(slurm, "exit 99")
    d = daemon(slurm, tmp_path, max_unsignalled_restarts=3)
    try:
        restarts = []
        for _ in range(12):
            d.round()
            restarts.append(slurm.show(job)["Restarts"])
            if comment(slurm, job).startswith("gavel-released:"):
                break
            time.sleep(2.5)  # the released run starts and exits 99
        d.round()  # the given-back job is no longer managed
    finally:
        d.store.release()
    said = comment(slurm, job)
    assert said.startswith("gavel-released: crash loop: its last 3 runs ended without the "
                           "checkpoint signal"), (restarts, slurm.why(job))  # fmt: skip
    assert "exit code 99" in said
    # what its owner sees: its comment, its AdminComment, `explain`
    seen = slurm.as_user("nobody", "scontrol", "show", "job", job)
    assert seen.returncode == 0 and "gavel-released: crash loop" in seen.stdout
    assert "AdminComment=slurm-gavel: given back to Slurm: crash loop" in seen.stdout
    text = explain(d, job)
    assert f"job {job}: given back" in text and "crash loop" in text
    assert metric(d, "slurm_gavel_jobs_given_back_total", why="crash_loop") == 1
    assert metric(d, "slurm_gavel_run_ends_total", kind="unsignalled") == 3
    # never cancelled: given back, it waits in Slurm's queue, released (Slurm's own
    # delay after a requeue, then RequeueExitHold holds it at its next exit 99), and the
    # daemon started it 3 times, not forever
    info = slurm.show(job)
    assert info["JobState"] == "PENDING" and info["Priority"] != "0", slurm.why(job)
    assert info["Restarts"] == "3"
    slurm.cancel_all()


def test_a_plain_script_the_checkpoint_signal_killed_is_told_why(slurm, tmp_path):
    slurm.cancel_all()
    job = submit(slurm, "sleep 300")  # no handler for SIGUSR1
    d = daemon(slurm, tmp_path)
    try:
        d.round()
        running(slurm, job)
        preempt(d)
        slurm.wait_state(job, "FAILED", timeout=30)
        d.round()
    finally:
        d.store.release()
    assert slurm.show(job)["ExitCode"] == "0:10"
    [n] = [n for n in view(d)["notices"] if n["id"] == job]
    assert n["kind"] == "ended"
    text = explain(d, job)
    assert "ended by the checkpoint signal SIGUSR1 (FAILED 0:10 after SIGUSR1)" in text
    assert "no handler" in text and "trap SIGUSR1" in text
    assert metric(d, "slurm_gavel_run_ends_total", kind="killed_by_signal") == 1
    slurm.cancel_all()


def test_a_job_that_ignores_the_signal_is_warned_then_given_back(slurm, tmp_path):
    slurm.cancel_all()
    job = submit(slurm, "trap '' USR1; sleep 300")
    d = daemon(slurm, tmp_path, max_ignored_signals=2)
    try:
        d.round()
        for turn in (1, 2):
            running(slurm, job)
            preempt(d)
            time.sleep(3.5)  # past its grace
            held, failed = d.backend.enforce_grace()
            assert held == [job], failed
            slurm.wait_state(job, "PENDING", timeout=30)
            d.round()
            if turn == 1:  # warned, and placed again
                admin = slurm.as_user("nobody", "scontrol", "show", "job", job).stdout
                assert "warning: it ignored the checkpoint signal (SIGUSR1) 1 time in a row" in (
                    admin
                ), admin
                assert "At 2 it is given back to Slurm, not preempted" in admin
                assert slurm.show(job)["Comment"] == "gavel:type=A3C"
    finally:
        d.store.release()
    assert comment(slurm, job).startswith("gavel-released: never checkpoints: it ignored"), (
        slurm.why(job)
    )
    assert "not preempted" in explain(d, job)
    assert metric(d, "slurm_gavel_jobs_given_back_total", why="ignored_signal") == 1
    # given back, released: Slurm runs it as a plain job (after its own delay after a
    # requeue), to its end; never cancelled
    info = slurm.show(job)
    assert info["JobState"] == "PENDING" and info["Priority"] != "0", slurm.why(job)
    slurm.cancel_all()
