"""submitit under slurm-gavel on the real local cluster: a GavelCheckpointable
job submitted with the real submitit package checkpoints on the daemon's signal, exits
99 and is held (submitit does not requeue it), is released and finishes from its
checkpointed state.

22.05 only (marker ``torch``: the job runs the repository's .venv, which the chroots lack).
"""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest
from held_jobs import move_and_release, signal_until_held, wait_for_steps

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
    wait_for_steps(tmp_path / "step", 5, 120)
    signal_until_held(slurm, job.job_id)  # the daemon's signal

    move_and_release(slurm, job.job_id, "Partition=p100")
    slurm.wait_state(job.job_id, "COMPLETED", timeout=120)
    first, second = (tmp_path / "log").read_text().splitlines()
    assert first == "start restart=0 done=0"
    done = int(second.split("done=")[1])
    assert second.startswith("start restart=1 ") and 5 <= done < STEPS
    with open(job.paths.result_pickle, "rb") as f:
        assert pickle.load(f) == ("success", STEPS)
