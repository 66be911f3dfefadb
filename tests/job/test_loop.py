"""GavelJob: no-op outside Slurm; on the signal: finish the step, checkpoint, exit 99; resume."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from slurm_gavel.job import GavelJob, managed_steps, read_report
from slurm_gavel.job.progress import report_path

REPO = Path(__file__).resolve().parents[2]

# A job without torch (torch import blocked): each step sleeps, then bumps a counter
# kept in a stateful object; the counter must equal the step count after any resume.
JOB = textwrap.dedent("""
    import sys, time
    sys.modules["torch"] = None  # the library must work without torch
    from slurm_gavel.job import GavelJob

    class Counter:
        def __init__(self): self.n = 0
        def state_dict(self): return {"n": self.n}
        def load_state_dict(self, d): self.n = d["n"]

    c = Counter()
    with GavelJob(counter=c) as job:
        print("start", job.step, flush=True)
        for step in job.steps(int(sys.argv[1])):
            time.sleep(0.15)
            c.n += 1
    print("done", job.step, c.n, flush=True)
""")


def _run_job(tmp_path: Path, steps: int, *, restarts: int) -> subprocess.CompletedProcess[str]:
    """The JOB script for `steps` steps, as run number `restarts` + 1 of job 555."""
    return subprocess.run(
        [sys.executable, "-c", JOB, str(steps)],
        env=_env(tmp_path, restarts),
        capture_output=True,
        text=True,
        timeout=60,
    )


def _env(tmp_path: Path, restarts: int) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "GAVEL_"))}
    env.update(
        {
            "SLURM_JOB_ID": "555",
            "SLURM_RESTART_COUNT": str(restarts),
            "GAVEL_CHECKPOINT_DIR": str(tmp_path / "ck"),
            "GAVEL_PROGRESS_DIR": str(tmp_path / "pr"),
            "GAVEL_PROGRESS_INTERVAL": "0",
            "GAVEL_JOB_TYPE": "A3C",
            "PYTHONPATH": str(REPO),
        }
    )
    return env


def _wait_steps(report: Path, steps: int, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        data = read_report(report)
        if data and data["steps"] >= steps:
            return
        time.sleep(0.05)
    raise AssertionError(f"no report with {steps} steps in {report}")


def test_signal_checkpoints_after_the_step_exits_99_and_restart_resumes(tmp_path: Path) -> None:
    report = report_path(tmp_path / "pr", "555")
    report.parent.mkdir(mode=0o2750, parents=True)  # as the daemon makes it
    proc = subprocess.Popen(
        [sys.executable, "-c", JOB, "40"],
        env=_env(tmp_path, 0),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    _wait_steps(report, 3)
    proc.send_signal(signal.SIGUSR1)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 99, err
    saved = json.loads(report.read_text())
    assert saved["state"] == "checkpointed" and 3 <= saved["steps"] < 40
    ckpts = sorted((tmp_path / "ck" / "555").glob("ckpt-*.pt"))
    assert [int(p.name[5:17]) for p in ckpts] == [saved["steps"]]
    assert "done" not in out

    # Requeued: SLURM_RESTART_COUNT=1. Every step ran exactly once across the two runs.
    res = _run_job(tmp_path, 40, restarts=1)
    assert res.returncode == 0, res.stderr
    assert f"start {saved['steps']}" in res.stdout
    assert "done 40 40" in res.stdout
    final = read_report(report)
    assert final is not None and final["state"] == "finished" and final["steps"] == 40
    assert final["restart_count"] == 1 and final["run_steps"] == 40 - saved["steps"]


def test_first_run_ignores_old_checkpoints_and_torn_ones_are_never_loaded(tmp_path: Path) -> None:
    folder = tmp_path / "ck" / "555"
    folder.mkdir(parents=True)
    (folder / "ckpt-000000000030.pt").write_bytes(b"GAVELCK1" + b"\0" * 60)  # torn
    res = _run_job(tmp_path, 2, restarts=0)
    assert res.returncode == 0 and "start 0" in res.stdout  # restart count 0: fresh start
    res = _run_job(tmp_path, 2, restarts=1)
    assert res.returncode == 0 and "start 0" in res.stdout and "done 2 2" in res.stdout
    assert "ignoring checkpoint" in res.stderr and "starting from step 0" in res.stderr


def test_iterate_knows_the_last_batch_when_the_loader_has_a_length(tmp_path: Path) -> None:
    env = {"SLURM_JOB_ID": "1", "GAVEL_CHECKPOINT_DIR": str(tmp_path)}
    job = GavelJob(env=env, value=3)
    try:
        for batch in job.iterate(["a", "b", "c"]):
            if batch == "c":
                os.kill(os.getpid(), signal.SIGUSR1)
        assert job.step == 3 and job.checkpoint_requested
    finally:
        job.close()
    # a generator has no length: the same signal still exits for a requeue
    job = GavelJob(env=env, value=3)
    try:
        with pytest.raises(SystemExit):
            for batch in job.iterate(x for x in "abc"):
                if batch == "c":
                    os.kill(os.getpid(), signal.SIGUSR1)
        assert job.step == 3
    finally:
        job.close()
    # a signal before the last batch exits at once, length or not
    job = GavelJob(env=env, value=3)
    try:
        with pytest.raises(SystemExit):
            for batch in job.iterate(["a", "b", "c"]):
                if batch == "a":
                    os.kill(os.getpid(), signal.SIGUSR1)
        assert job.step == 1
    finally:
        job.close()


def test_outside_slurm_it_is_a_plain_range(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    monkeypatch.chdir(tmp_path)
    before = signal.getsignal(signal.SIGUSR1)
    with GavelJob(counter=object()) as job:
        assert not job.active and signal.getsignal(signal.SIGUSR1) is before
        assert list(job.steps(4)) == [0, 1, 2, 3]
        assert job.checkpoint() is None
    assert list(managed_steps(3)) == [0, 1, 2]
    assert list(tmp_path.iterdir()) == []


def test_request_in_process_raises_systemexit_with_the_configured_code(tmp_path: Path) -> None:
    env = {
        "SLURM_JOB_ID": "1",
        "GAVEL_CHECKPOINT_DIR": str(tmp_path),
        "GAVEL_REQUEUE_EXIT_CODE": "97",
    }
    job = GavelJob(env=env, value=3)
    try:
        with pytest.raises(SystemExit) as e:
            for step in job.steps(10):
                if step == 1:
                    os.kill(os.getpid(), signal.SIGUSR1)
        assert e.value.code == 97 and job.step == 2
        assert (tmp_path / "1" / "ckpt-000000000002.pt").exists()
    finally:
        job.close()


def test_a_signal_during_the_last_step_lets_the_job_finish(tmp_path: Path) -> None:
    # The daemon can preempt a job just as it ends; a requeue then would cost a restart
    # that only reloads the checkpoint and finishes. The job ends normally instead.
    job = GavelJob(env={"SLURM_JOB_ID": "1", "GAVEL_CHECKPOINT_DIR": str(tmp_path)}, value=3)
    try:
        for step in job.steps(3):
            if step == 2:
                os.kill(os.getpid(), signal.SIGUSR1)
        assert job.step == 3 and job.checkpoint_requested
        assert not (tmp_path / "1").exists() or not list((tmp_path / "1").iterdir())
    finally:
        job.close()
