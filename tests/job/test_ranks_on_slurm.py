"""Multi-rank jobs on the real local cluster: a 2-node, 2-rank gloo job on CPU
is signalled as the daemon does it, checkpoints, is held, moved to other nodes, released
and resumed; its final parameters are bit-identical to an uninterrupted run's.

The same with sharded checkpoints: a 2-rank FSDP job whose ranks each save their shard
with torch.distributed.checkpoint (GavelJob(..., sharded=True)).

22.05 only (marker ``torch``): the ranks run the repository's .venv, which the 24.11 and
26.05 chroots do not have (tests/conftest.py).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from held_jobs import move_and_release, signal_until_held, two_rank_job, wait_for_steps

JOBS = Path(__file__).resolve().parent / "jobs"
STEPS = 60

pytestmark = [pytest.mark.slurm, pytest.mark.torch, pytest.mark.slow]


def _submit(  # type: ignore[no-untyped-def]
    slurm, out: Path, partition: str, script: str = "ddp.sbatch", train: str = "ddp_train.py"
) -> str:
    return slurm.sbatch(
        *two_rank_job(out, partition),
        str(JOBS / script), sys.executable, str(JOBS / train), str(out),
        str(STEPS),
    )  # fmt: skip


def _start(  # type: ignore[no-untyped-def]
    slurm, tmp_path: Path, script: str = "ddp.sbatch", train: str = "ddp_train.py"
) -> tuple[str, str, Path, Path]:
    """The job to move (on v100, its batch script `script`) and its uninterrupted twin
    (on k80), the first running 5 steps in: both ids and their output folders."""
    tmp_path.chmod(0o700)
    moved, plain = tmp_path / "moved", tmp_path / "plain"
    job = _submit(slurm, moved, "v100", script, train)
    ref = _submit(slurm, plain, "k80", train=train)  # the uninterrupted run, beside it
    assert slurm.wait_state(job, "RUNNING", timeout=60) == "RUNNING"
    wait_for_steps(moved / "step", 5, 120)
    return job, ref, moved, plain


def _resume_on_p100(slurm, job: str, ref: str, moved: Path, plain: Path, stop: int) -> str:  # type: ignore[no-untyped-def]
    """Move the held job to two other nodes and release it (what the daemon does): every
    rank resumed from the one step the ranks stopped on, on the new nodes, and ended
    bit-identical to the uninterrupted run. The job's output."""
    move_and_release(slurm, job, "Partition=p100", "NodeList=p100-[1-2]")
    slurm.wait_state(job, "COMPLETED", timeout=180)
    slurm.wait_state(ref, "COMPLETED", timeout=180)
    for r in (0, 1):
        first, second = (moved / f"log-{r}").read_text().splitlines()
        assert f"rank={r} restart=0 step=0 node=v100-" in first
        assert f"rank={r} restart=1 step={stop} node=p100-" in second, second
    out = (moved / "slurm.out").read_text()
    assert out.count(f"at step {stop}; exiting 99") == 2, out  # both ranks, same step
    assert (moved / "final").read_text() == (plain / "final").read_text()
    return out


# (scancel options, batch script): the daemon's form today, with the batch script passing
# the signal on to srun; and --full, which signals every step's tasks directly.
SIGNAL_FORMS = {"batch": (["--batch"], "ddp.sbatch"), "full": (["--full"], "ddp_full.sbatch")}


@pytest.mark.parametrize("form", sorted(SIGNAL_FORMS))
def test_two_ranks_stop_on_one_step_move_and_resume_bit_identical(slurm, tmp_path, form) -> None:  # type: ignore[no-untyped-def]
    scancel_opts, script = SIGNAL_FORMS[form]
    job, ref, moved, plain = _start(slurm, tmp_path, script)
    signal_until_held(slurm, job, *scancel_opts)
    logs = [(moved / f"log-{r}").read_text().splitlines() for r in (0, 1)]
    assert all(len(lines) == 1 for lines in logs), logs
    (ckpt,) = sorted((moved / "ck" / job).glob("ckpt-*.pt"))  # rank 0 wrote one file
    stop = int(ckpt.stem.split("-")[1])
    assert 5 <= stop < STEPS
    _resume_on_p100(slurm, job, ref, moved, plain, stop)


def test_two_fsdp_ranks_save_their_shards_move_and_resume_bit_identical(slurm, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Sharded save path: every rank writes its shard of an FSDP model (torch DCP)."""
    job, ref, moved, plain = _start(slurm, tmp_path, train="fsdp_train.py")
    signal_until_held(slurm, job)  # the daemon's form
    (done,) = (moved / "ck" / job).iterdir()  # one complete directory, no partial left
    assert done.name.startswith("dcp-"), done
    assert sorted(p.name for p in done.glob("*.distcp")) == ["__0_0.distcp", "__1_0.distcp"]
    assert (done / "GAVEL-COMPLETE").is_file()
    stop = int(done.name.split("-")[1])
    assert 5 <= stop < STEPS
    out = _resume_on_p100(slurm, job, ref, moved, plain, stop)
    assert out.count(f"resumed from {done} at step {stop}") == 2, out
