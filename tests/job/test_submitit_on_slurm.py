"""submitit under slurm-gavel on the real local cluster: a GavelCheckpointable
job submitted with the real submitit package checkpoints on the daemon's signal, exits
99 and is held (submitit does not requeue it), is released and finishes from its
checkpointed state.

22.05 only (marker ``torch``: the job runs the repository's .venv, which the chroots lack).
"""

from __future__ import annotations

import pickle
import time
from pathlib import Path

import pytest

submitit = pytest.importorskip("submitit")
from slurm_gavel.job.submitit import SRUN_FORWARDING, gavel_executor_parameters  # noqa: E402

JOBS = Path(__file__).resolve().parent / "jobs"
STEPS = 60
pytestmark = [pytest.mark.slurm, pytest.mark.torch, pytest.mark.slow]


def test_gavel_executor_parameters() -> None:
    p = gavel_executor_parameters("ResNet-50 (batch size 64)", gpus=2, steps=100)
    assert p["slurm_setup"] == list(SRUN_FORWARDING)
    assert p["slurm_additional_parameters"] == {
        "requeue": True,
        "comment": "gavel:type=ResNet-50 (batch size 64),scale=2,steps=100",
    }
    assert "comment" not in gavel_executor_parameters()["slurm_additional_parameters"]


def _wait_step(path: Path, at_least: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and path.read_text().strip() and int(path.read_text()) >= at_least:
            return
        time.sleep(0.2)
    raise AssertionError(f"fewer than {at_least} steps after {timeout}s")


def test_checkpointable_is_held_not_requeued_and_resumes(slurm, tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    for k, v in slurm.env.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("PYTHONPATH", str(JOBS))  # the job imports the class from there
    monkeypatch.syspath_prepend(str(JOBS))
    from submitit_count import Count

    executor = submitit.AutoExecutor(folder=tmp_path / "sub", cluster="slurm")
    executor.update_parameters(
        timeout_min=10, slurm_partition="v100", **gavel_executor_parameters()
    )
    job = executor.submit(Count(), STEPS, str(tmp_path))
    _wait_step(tmp_path / "step", 5, 120)
    slurm.cmd("scancel", "--signal=USR1", "--batch", job.job_id)  # the daemon's signal
    slurm.wait_state(job.job_id, "SPECIAL_EXIT", "PENDING", timeout=90)
    info = slurm.show(job.job_id)
    assert info["Restarts"] == "1" and info["Reason"] == "JobHeldUser", slurm.why(job.job_id)
    assert info["ExitCode"].startswith("99"), slurm.why(job.job_id)

    slurm.cmd("scontrol", "update", f"JobId={job.job_id}", "Partition=p100")
    slurm.cmd("scontrol", "release", job.job_id)
    slurm.cmd("scontrol", "update", f"JobId={job.job_id}", "StartTime=now", check=False)
    slurm.wait_state(job.job_id, "COMPLETED", timeout=120)
    first, second = (tmp_path / "log").read_text().splitlines()
    assert first == "start restart=0 done=0"
    done = int(second.split("done=")[1])
    assert second.startswith("start restart=1 ") and 5 <= done < STEPS
    with open(job.paths.result_pickle, "rb") as f:
        assert pickle.load(f) == ("success", STEPS)
