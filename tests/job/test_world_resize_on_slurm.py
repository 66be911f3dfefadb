"""A job held by Slurm, its node and task counts changed, released: the ranks follow
(the moldable job side on the real local cluster).

A 2-node, 2-rank gloo job (tests/job/jobs/resize_train.py: global batch 16, micro
batch 4) checkpoints at step 4 and exits 99; Slurm holds it. With the job held, its
counts go to 1 node / 1 task (``scontrol update NumNodes=N-N NumTasks=N``, as the daemon
does for a moldable job before it releases it); it resumes on 1 rank with 4
accumulation steps, stops at step 8, is set back to 2 nodes / 2 tasks and finishes.
Its final loss is within 1e-5 relative of an uninterrupted 2-rank run beside it (the
tolerance of tests/job/test_world_resize.py, which says why).

22.05 only (marker ``torch``): the ranks run the repository's .venv (tests/conftest.py).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest
from held_jobs import two_rank_job

JOBS = Path(__file__).resolve().parent / "jobs"
pytestmark = [pytest.mark.slurm, pytest.mark.torch, pytest.mark.slow]


def _submit(slurm, out: Path, partition: str, mode: str, stops: str) -> str:  # type: ignore[no-untyped-def]
    return slurm.sbatch(
        *two_rank_job(out, partition),
        str(JOBS / "resize.sbatch"), sys.executable, str(JOBS / "resize_train.py"),
        str(out), mode, "12", stops, "1",
    )  # fmt: skip


def _held_then_released(slurm, job: str, restarts: int, nodes: str, count: int) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + 180
    while True:  # held once more: it stopped at its next STOPS step and exited 99
        info = slurm.show(job)
        if info["Restarts"] == str(restarts) and info["Reason"] == "JobHeldUser":
            break
        assert time.monotonic() < deadline, slurm.why(job)
        time.sleep(0.5)
    assert info["ExitCode"].startswith("99"), slurm.why(job)
    slurm.cmd(
        "scontrol", "update", f"JobId={job}", "Partition=p100", f"NodeList={nodes}",
        f"NumNodes={count}-{count}", f"NumTasks={count}",
    )  # fmt: skip
    # (a held job that ran shows its last run's NumNodes until it runs again; the
    # ranks' log below shows the new count)
    assert slurm.show(job)["NumTasks"] == str(count)
    # slurmd refuses a relaunch on a node whose last run of the job ended in the same
    # second ("Job credential revoked"); the daemon waits too (backends/slurm/preemption.py)
    time.sleep(1.5)
    slurm.cmd("scontrol", "release", job)
    slurm.cmd("scontrol", "update", f"JobId={job}", "StartTime=now", check=False)


@pytest.mark.parametrize("mode", ["ddp", "fsdp"])
def test_a_held_job_resumed_on_one_task_then_two_ends_at_the_uninterrupted_loss(  # type: ignore[no-untyped-def]
    slurm, tmp_path, mode
) -> None:
    tmp_path.chmod(0o700)
    moved, plain = tmp_path / "moved", tmp_path / "plain"
    job = _submit(slurm, moved, "v100", mode, "4,8")
    ref = _submit(slurm, plain, "k80", mode, "0")
    _held_then_released(slurm, job, 1, "p100-1", 1)
    _held_then_released(slurm, job, 2, "p100-[1-2]", 2)
    for j, out in ((job, moved), (ref, plain)):
        try:
            slurm.wait_state(j, "COMPLETED", timeout=180)
        except AssertionError as e:  # say where it stuck
            said = (out / "slurm.out").read_text() if (out / "slurm.out").exists() else ""
            raise AssertionError(f"{e}\n{slurm.why(j)}\n{said[-3000:]}") from None

    log0 = (moved / "log-0").read_text().splitlines()
    assert [line.split(" node=")[0] for line in log0] == [
        "start world=2 previous=None step=0 accumulation=2 global=16",
        "change 2->1 step=4",
        "start world=1 previous=2 step=4 accumulation=4 global=16",
        "change 1->2 step=8",
        "start world=2 previous=1 step=8 accumulation=2 global=16",
    ]
    assert [line.split(" node=")[1] for line in log0 if "node=" in line] == [
        "v100-1",
        "p100-1",
        "p100-1",
    ]
    out = (moved / "slurm.out").read_text()
    assert "world size changed 2 -> 1 ranks at step 4; global batch 16 kept" in out
    assert "world size changed 1 -> 2 ranks at step 8; global batch 16 kept" in out
    final = float.fromhex((moved / "final").read_text().strip())
    assert final == pytest.approx(float.fromhex((plain / "final").read_text()), rel=1e-5)
