"""Sharded checkpoints of a 2-rank FSDP job without Slurm: two gloo ranks in subprocesses.

Each rank holds only its shard of the model (FSDP2 ``fully_shard``); GavelJob(...,
sharded=True) saves every rank's shard with torch.distributed.checkpoint. Only rank 1
gets the checkpoint signal (a real SIGUSR1); both stop on one step, both exit 99,
both resume there, and the final (gathered) state is bit-identical to an uninterrupted
run's. tests/job/test_sharded_on_slurm.py runs the same job on the local cluster;
tests/job/test_sharded_hostile.py tampers with the directories.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from two_ranks import clean_env, failed, free_port, run_two_ranks

pytest.importorskip("torch")
pytestmark = [pytest.mark.torch, pytest.mark.slow]
SCRIPT = Path(__file__).resolve().parent / "jobs" / "fsdp_train.py"
STEPS = 30


def _run(out: Path, restarts: int, signal_after: int | None = None) -> list[tuple[int, str]]:
    out.mkdir(mode=0o700, exist_ok=True)
    port = str(free_port())
    base = clean_env()
    procs = []
    for rank in (0, 1):
        env = {
            **base,
            "SLURM_JOB_ID": "5",
            "SLURM_RESTART_COUNT": str(restarts),
            "SLURM_PROCID": str(rank),
            "SLURM_NTASKS": "2",
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": port,
            "GAVEL_CHECKPOINT_DIR": str(out / "ck"),
            "STEP_SLEEP": "0.05",
        }
        cmd = [sys.executable, str(SCRIPT), str(out), str(STEPS)]
        procs.append(subprocess.Popen(cmd, env=env, stderr=subprocess.PIPE, text=True))
    if signal_after is not None:
        deadline = time.monotonic() + 120
        step = out / "step"
        while not (step.exists() and step.read_text().strip() and int(step.read_text()) >= 5):
            assert time.monotonic() < deadline, "the ranks made no progress"
            time.sleep(0.05)
        procs[1].send_signal(signal.SIGUSR1)  # rank 1 only
    return [(p.wait(timeout=180), p.stderr.read() if p.stderr else "") for p in procs]


def test_two_fsdp_ranks_save_shards_stop_together_and_resume_bit_identical(
    tmp_path: Path,
) -> None:
    tmp_path.chmod(0o700)
    ref, moved = tmp_path / "ref", tmp_path / "moved"
    plain = _run(ref, 0)
    assert [rc for rc, _ in plain] == [0, 0], [err for _, err in plain]

    first = _run(moved, 0, signal_after=5)
    assert [rc for rc, _ in first] == [99, 99], [err for _, err in first]
    (done,) = (moved / "ck" / "5").iterdir()  # one complete directory, no partial left
    stop = int(done.name.split("-")[1])
    assert 5 <= stop < STEPS
    shards = sorted(p.name for p in done.glob("*.distcp"))
    assert shards == ["__0_0.distcp", "__1_0.distcp"]  # both ranks wrote their shard
    for r, (_, err) in enumerate(first):
        assert f"rank {r}: checkpoint {done} at step {stop}; exiting 99" in err, err

    second = _run(moved, 1)
    assert [rc for rc, _ in second] == [0, 0], [err for _, err in second]
    for r, (_, err) in enumerate(second):
        assert f"resumed from {done} at step {stop}" in err
        lines = (moved / f"log-{r}").read_text().splitlines()
        assert [line.split(" node=")[0] for line in lines] == [
            f"start rank={r} restart=0 step=0",
            f"start rank={r} restart=1 step={stop}",
        ]
    assert (moved / "final").read_text() == (ref / "final").read_text()


LOCAL = Path(__file__).resolve().parent / "jobs" / "sharded_local.py"


def _local(dirs: list[Path], restarts: int, mode: str) -> list[subprocess.CompletedProcess[str]]:
    port = str(free_port())
    return run_two_ranks(LOCAL, [[str(r), port, str(dirs[r]), str(restarts), mode] for r in (0, 1)])


def test_a_replicated_model_saved_before_the_loop_is_one_directory_and_loads(
    tmp_path: Path,
) -> None:
    """checkpoint() before resume()/steps() still finds the ranks (it used to let every
    rank save as rank 0); a DDP-style model, whole on every rank, also saves sharded."""
    tmp_path.chmod(0o700)
    ck = tmp_path / "ck"
    saved = _local([ck, ck], 0, "save")
    assert [p.returncode for p in saved] == [0, 0], [p.stderr for p in saved]
    (done,) = (ck / "8").iterdir()
    assert done.name == "dcp-000000000003"
    assert [p.stdout.splitlines()[0] for p in saved] == [f"saved {done}"] * 2
    weights = saved[0].stdout.split()[-1]
    loaded = _local([ck, ck], 1, "load")
    assert [p.returncode for p in loaded] == [0, 0], [p.stderr for p in loaded]
    assert [p.stdout.split() for p in loaded] == [["loaded", "3", weights]] * 2

    plain = tmp_path / "plain"
    saved = _local([plain, plain], 0, "plain")  # rank 0 alone writes one file
    assert [p.stdout.splitlines()[0] for p in saved] == [
        f"saved {plain / '8' / 'ckpt-000000000003.pt'}",
        "saved None",
    ]


def test_a_folder_that_is_not_shared_stops_every_rank_with_a_clear_error(tmp_path: Path) -> None:
    tmp_path.chmod(0o700)
    node0, node1 = tmp_path / "node0", tmp_path / "node1"
    saved = _local([node0, node1], 0, "save")  # rank 1 cannot see rank 0's directory
    assert [failed(p.returncode) for p in saved] == [True, True], saved
    assert "must be on a shared file system" in saved[1].stderr
    assert "rank 1 could not open the checkpoint directory" in saved[0].stderr
    assert not list((node0 / "8").glob("dcp-*"))  # nothing complete (a partial, never read)

    shared = tmp_path / "shared"
    assert [p.returncode for p in _local([shared, shared], 0, "save")] == [0, 0]
    loaded = _local([shared, node1], 1, "load")  # rank 1 would start over from step 0
    assert [failed(p.returncode) for p in loaded] == [True, True], loaded
    for p in loaded:
        assert "RankMismatchError: the ranks see different checkpoints" in p.stderr, p.stderr
        assert "file system every node sees" in p.stderr
