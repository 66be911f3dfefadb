"""Lightning under slurm-gavel on the real local cluster: GavelCallback
checkpoints on the daemon's signal, the job is held (not requeued by Lightning),
released, and resumes with ``ckpt_path`` at the saved step.

22.05 only (marker ``torch``): the job runs the repository's .venv.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from held_jobs import move_and_release, signal_until_held, wait_for_steps

pytest.importorskip("lightning")
JOBS = Path(__file__).resolve().parent / "jobs"
STEPS = 40
pytestmark = [pytest.mark.slurm, pytest.mark.torch, pytest.mark.slow]


def _submit(slurm, out: Path) -> str:  # type: ignore[no-untyped-def]
    out.mkdir(mode=0o700)
    return slurm.sbatch(
        "-p", "v100", "--requeue", "--open-mode=append", "-o", str(out / "slurm.out"),
        "--chdir", str(out), f"--export=ALL,GAVEL_CHECKPOINT_DIR={out / 'ck'}",
        "--wrap", f"trap '' USR1; exec {sys.executable} {JOBS / 'lit_train.py'} {out} {STEPS}",
    )  # fmt: skip


def test_lightning_job_checkpoints_is_held_released_and_resumes(slurm, tmp_path) -> None:  # type: ignore[no-untyped-def]
    tmp_path.chmod(0o700)
    moved = tmp_path / "moved"
    job = _submit(slurm, moved)
    wait_for_steps(moved / "step", 5, 120)
    # the daemon's signal: held by the requeue-hold exit code, not requeued by Lightning
    signal_until_held(slurm, job)
    ckpt = moved / "ck" / job / "gavel-last.ckpt"
    saved = int(__import__("torch").load(ckpt, weights_only=True)["global_step"])
    assert 5 <= saved < STEPS
    assert not list(moved.rglob("hpc_ckpt_*.ckpt"))  # Lightning's own requeue stayed off

    move_and_release(slurm, job, "Partition=p100")
    slurm.wait_state(job, "COMPLETED", timeout=180)
    log = (moved / "log").read_text().splitlines()
    assert log[0] == "start restart=0 ckpt=None step=0"
    assert log[1] == f"start restart=1 ckpt={ckpt} step={saved}", log
    # Not bit-identical to an uninterrupted run: Lightning restarts a plain DataLoader's
    # epoch on a mid-epoch resume (docs/frameworks/lightning.md says what to do).
    assert log[2].startswith(f"done step={STEPS} ")
