"""A 2-rank gloo job resumed at 1 rank and again at 2 ends where an uninterrupted run
does (the job side follows the GPU count).

tests/job/jobs/resize_train.py declares a global batch of 16 and a micro batch of 4:
2 accumulation steps per rank on 2 ranks, 4 on 1. It runs 12 steps on 2 ranks
uninterrupted; and 2 ranks to step 4 (checkpoint, exit 99), 1 rank to step 8, 2 ranks
to the end. Both save paths: rank 0's single file (DDP) and every rank's shard (FSDP2,
resharded by torch.distributed.checkpoint from 2 shards onto 1 rank and back).

Tolerance: relative 1e-5 on the final evaluation loss. The arithmetic is the same sum
of the same per-sample gradients; only the order of the float32 additions differs (two
micro batches per rank plus an all-reduce of two ranks, against four micro batches on
one rank), a few units in the last place per step, carried through 12 Adam steps.
Measured here (torch 2.13, CPU): 1.9e-7 relative (DDP) and 6.3e-8 (FSDP). Without the
kept global batch (keep_global_batch=False: the 1-rank run takes 8 samples a step
instead of 16) the loss differs by 0.16 relative; the test checks over 1e-3, so the
tolerance tells the two apart. ``pytest -s tests/job/test_world_resize.py`` prints
the figures.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from two_ranks import clean_env, free_port

pytest.importorskip("torch")
pytestmark = [pytest.mark.torch, pytest.mark.slow]
SCRIPT = Path(__file__).resolve().parent / "jobs" / "resize_train.py"
TOTAL = 12
REL_TOL = 1e-5


def _launch(out: Path, world: int, restarts: int, mode: str, stop: int, keep: bool) -> list[str]:
    """Run the job on ``world`` ranks; each rank's stderr; asserts the exit codes."""
    out.mkdir(mode=0o700, exist_ok=True)
    port = str(free_port())
    procs = []
    for rank in range(world):
        env = {
            **clean_env(),
            "SLURM_JOB_ID": "25",
            "SLURM_RESTART_COUNT": str(restarts),
            "SLURM_PROCID": str(rank),
            "SLURM_NTASKS": str(world),
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": port,
            "GAVEL_CHECKPOINT_DIR": str(out / "ck"),
        }
        cmd = [sys.executable, str(SCRIPT), str(out), mode, str(TOTAL), str(stop), str(int(keep))]
        procs.append(subprocess.Popen(cmd, env=env, stderr=subprocess.PIPE, text=True))
    results = [(p.wait(timeout=180), p.stderr.read() if p.stderr else "") for p in procs]
    want = 99 if stop else 0
    assert [rc for rc, _ in results] == [want] * world, [err for _, err in results]
    return [err for _, err in results]


def _log(out: Path, rank: int) -> list[str]:
    return [line.split(" node=")[0] for line in (out / f"log-{rank}").read_text().splitlines()]


def _final(out: Path) -> float:
    return float.fromhex((out / "final").read_text().strip())


def _resized(out: Path, mode: str, keep: bool) -> list[str]:
    """2 ranks to step 4, 1 rank to step 8, 2 ranks to the end; rank 0's stderr of each."""
    errs = [_launch(out, 2, 0, mode, 4, keep)[0]]
    errs.append(_launch(out, 1, 1, mode, 8, keep)[0])
    errs.append(_launch(out, 2, 2, mode, 0, keep)[0])
    return errs


@pytest.mark.parametrize("mode", ["ddp", "fsdp"])
def test_resumed_at_one_rank_and_again_at_two_reaches_the_uninterrupted_loss(
    tmp_path: Path, mode: str
) -> None:
    tmp_path.chmod(0o700)
    ref, moved = tmp_path / "ref", tmp_path / "moved"
    _launch(ref, 2, 0, mode, 0, True)
    errs = _resized(moved, mode, True)
    rel = abs(_final(moved) - _final(ref)) / abs(_final(ref))
    print(f"{mode}: final loss {_final(moved)!r} vs {_final(ref)!r}, relative {rel:.2e}")
    assert rel <= REL_TOL

    assert "world size changed 2 -> 1 ranks at step 4; global batch 16 kept: 4" in errs[1]
    assert "world size changed 1 -> 2 ranks at step 8; global batch 16 kept: 2" in errs[2]
    assert _log(moved, 0) == [
        "start world=2 previous=None step=0 accumulation=2 global=16",
        "change 2->1 step=4",  # the hook runs on resume, before the loop
        "start world=1 previous=2 step=4 accumulation=4 global=16",
        "change 1->2 step=8",
        "start world=2 previous=1 step=8 accumulation=2 global=16",
    ]
    rank1 = _log(moved, 1)
    assert rank1 == [
        "start world=2 previous=None step=0 accumulation=2 global=16",
        "change 1->2 step=8",
        "start world=2 previous=1 step=8 accumulation=2 global=16",
    ]


def test_opting_out_of_the_kept_global_batch_changes_the_run(tmp_path: Path) -> None:
    """The control: the same moves without the kept global batch end elsewhere."""
    tmp_path.chmod(0o700)
    ref, moved = tmp_path / "ref", tmp_path / "moved"
    _launch(ref, 2, 0, "ddp", 0, False)
    errs = _resized(moved, "ddp", False)
    assert "keep_global_batch=False: the global batch is now 8" in errs[1]
    rel = abs(_final(moved) - _final(ref)) / abs(_final(ref))
    print(f"opted out: final loss {_final(moved)!r} vs {_final(ref)!r}, relative {rel:.2e}")
    assert rel > 1e-3
