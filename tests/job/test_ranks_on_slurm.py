"""Multi-rank jobs on the real local cluster: a 2-node, 2-rank gloo job on CPU
is signalled as the daemon does it, checkpoints, is held, moved to other nodes, released
and resumed; its final parameters are bit-identical to an uninterrupted run's.

The same with sharded checkpoints: a 2-rank FSDP job whose ranks each save their shard
with torch.distributed.checkpoint (GavelJob(..., sharded=True)).

22.05 only (marker ``torch``): the ranks run the repository's .venv, which the 24.11 and
26.05 chroots do not have (tests/conftest.py).
"""

from __future__ import annotations

import socket
import sys
import time
from pathlib import Path

import pytest

JOBS = Path(__file__).resolve().parent / "jobs"
STEPS = 60

pytestmark = [pytest.mark.slurm, pytest.mark.torch, pytest.mark.slow]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _submit(  # type: ignore[no-untyped-def]
    slurm, out: Path, partition: str, script: str = "ddp.sbatch", train: str = "ddp_train.py"
) -> str:
    out.mkdir(mode=0o700)
    return slurm.sbatch(
        "-p", partition, "-N", "2", "--ntasks-per-node=1", "--requeue",
        "--open-mode=append", "-o", str(out / "slurm.out"), "--chdir", str(out),
        f"--export=ALL,MASTER_ADDR=127.0.0.1,MASTER_PORT={_free_port()},"
        f"GAVEL_CHECKPOINT_DIR={out / 'ck'}",
        str(JOBS / script), sys.executable, str(JOBS / train), str(out),
        str(STEPS),
    )  # fmt: skip


def _wait_for(path: Path, ok, timeout: float, what: str) -> str:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = path.read_text() if path.exists() else ""
        if ok(text):
            return text
        time.sleep(0.2)
    raise AssertionError(f"no {what} after {timeout}s: {path} holds {text!r}")


# (scancel options, batch script): the daemon's form today, with the batch script passing
# the signal on to srun; and --full, which signals every step's tasks directly.
SIGNAL_FORMS = {"batch": (["--batch"], "ddp.sbatch"), "full": (["--full"], "ddp_full.sbatch")}


@pytest.mark.parametrize("form", sorted(SIGNAL_FORMS))
def test_two_ranks_stop_on_one_step_move_and_resume_bit_identical(slurm, tmp_path, form) -> None:  # type: ignore[no-untyped-def]
    tmp_path.chmod(0o700)
    scancel_opts, script = SIGNAL_FORMS[form]
    moved, plain = tmp_path / "moved", tmp_path / "plain"
    job = _submit(slurm, moved, "v100", script)
    ref = _submit(slurm, plain, "k80")  # the uninterrupted run, beside it
    assert slurm.wait_state(job, "RUNNING", timeout=60) == "RUNNING"
    _wait_for(moved / "step", lambda t: t.strip() and int(t) >= 5, 120, "5 steps")

    slurm.cmd("scancel", "--signal=USR1", *scancel_opts, job)
    slurm.wait_state(job, "SPECIAL_EXIT", "PENDING", timeout=90)
    info = slurm.show(job)
    assert info["Restarts"] == "1" and info["Reason"] == "JobHeldUser", slurm.why(job)
    assert info["ExitCode"].startswith("99"), slurm.why(job)
    logs = [(moved / f"log-{r}").read_text().splitlines() for r in (0, 1)]
    assert all(len(lines) == 1 for lines in logs), logs
    (ckpt,) = sorted((moved / "ck" / job).glob("ckpt-*.pt"))  # rank 0 wrote one file
    stop = int(ckpt.stem.split("-")[1])
    assert 5 <= stop < STEPS

    # Move to two other nodes, then release (what the daemon does).
    slurm.cmd("scontrol", "update", f"JobId={job}", "Partition=p100", "NodeList=p100-[1-2]")
    slurm.cmd("scontrol", "release", job)
    slurm.cmd("scontrol", "update", f"JobId={job}", "StartTime=now", check=False)
    slurm.wait_state(job, "COMPLETED", timeout=180)
    slurm.wait_state(ref, "COMPLETED", timeout=180)

    for r in (0, 1):
        first, second = (moved / f"log-{r}").read_text().splitlines()
        assert f"rank={r} restart=0 step=0 node=v100-" in first
        # every rank resumed from the one step the ranks stopped on, on the new nodes
        assert f"rank={r} restart=1 step={stop} node=p100-" in second, second
    out = (moved / "slurm.out").read_text()
    assert out.count(f"at step {stop}; exiting 99") == 2, out  # both ranks, same step
    assert (moved / "final").read_text() == (plain / "final").read_text()


def test_two_fsdp_ranks_save_their_shards_move_and_resume_bit_identical(slurm, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Sharded save path: every rank writes its shard of an FSDP model (torch DCP)."""
    tmp_path.chmod(0o700)
    moved, plain = tmp_path / "moved", tmp_path / "plain"
    job = _submit(slurm, moved, "v100", train="fsdp_train.py")
    ref = _submit(slurm, plain, "k80", train="fsdp_train.py")
    assert slurm.wait_state(job, "RUNNING", timeout=60) == "RUNNING"
    _wait_for(moved / "step", lambda t: t.strip() and int(t) >= 5, 120, "5 steps")

    slurm.cmd("scancel", "--signal=USR1", "--batch", job)  # the daemon's form
    slurm.wait_state(job, "SPECIAL_EXIT", "PENDING", timeout=90)
    info = slurm.show(job)
    assert info["Restarts"] == "1" and info["Reason"] == "JobHeldUser", slurm.why(job)
    assert info["ExitCode"].startswith("99"), slurm.why(job)
    (done,) = (moved / "ck" / job).iterdir()  # one complete directory, no partial left
    assert done.name.startswith("dcp-"), done
    assert sorted(p.name for p in done.glob("*.distcp")) == ["__0_0.distcp", "__1_0.distcp"]
    assert (done / "GAVEL-COMPLETE").is_file()
    stop = int(done.name.split("-")[1])
    assert 5 <= stop < STEPS

    slurm.cmd("scontrol", "update", f"JobId={job}", "Partition=p100", "NodeList=p100-[1-2]")
    slurm.cmd("scontrol", "release", job)
    slurm.cmd("scontrol", "update", f"JobId={job}", "StartTime=now", check=False)
    slurm.wait_state(job, "COMPLETED", timeout=180)
    slurm.wait_state(ref, "COMPLETED", timeout=180)

    for r in (0, 1):
        first, second = (moved / f"log-{r}").read_text().splitlines()
        assert f"rank={r} restart=0 step=0 node=v100-" in first
        assert f"rank={r} restart=1 step={stop} node=p100-" in second, second
    out = (moved / "slurm.out").read_text()
    assert out.count(f"at step {stop}; exiting 99") == 2, out  # both ranks, same step
    assert out.count(f"resumed from {done} at step {stop}") == 2, out
    assert (moved / "final").read_text() == (plain / "final").read_text()
