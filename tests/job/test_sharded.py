"""Sharded checkpoints of a 2-rank FSDP job without Slurm: two gloo ranks in subprocesses.

Each rank holds only its shard of the model (FSDP2 ``fully_shard``); GavelJob(...,
sharded=True) saves every rank's shard with torch.distributed.checkpoint. Only rank 1
gets the checkpoint signal (a real SIGUSR1); both stop on one step, both exit 99,
both resume there, and the final (gathered) state is bit-identical to an uninterrupted
run's. tests/job/test_sharded_on_slurm.py runs the same job on the local cluster;
tests/job/test_sharded_hostile.py tampers with the directories.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytestmark = [pytest.mark.torch, pytest.mark.slow]
SCRIPT = Path(__file__).resolve().parent / "jobs" / "fsdp_train.py"
STEPS = 30


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _run(out: Path, restarts: int, signal_after: int | None = None) -> list[tuple[int, str]]:
    out.mkdir(mode=0o700, exist_ok=True)
    port = str(_port())
    base = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "GAVEL_"))}
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
