"""What the daemon does to a training job on the real local cluster, for the library's
Slurm tests: wait for the job's steps, signal it, see it held, move and release it.

Imported as a plain module: pytest puts this folder on sys.path (tests/ is not a package).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from two_ranks import free_port
from waiting import wait_for


def steps_in(path: Path) -> int:
    """The step count a test training script writes to `path` (0 before the first)."""
    text = path.read_text() if path.exists() else ""
    return int(text) if text.strip() else 0


def wait_for_steps(path: Path, at_least: int, timeout: float) -> None:
    wait_for(lambda: steps_in(path) >= at_least, timeout, f"{at_least} steps in {path}", poll=0.2)


def signal_until_held(slurm: Any, job: str, *scancel_opts: str) -> None:
    """Signal `job` as the daemon does (scancel --signal=USR1 with `scancel_opts`,
    --batch by default): it checkpoints and exits 99, and Slurm holds it (a requeue
    hold, not a plain requeue)."""
    slurm.cmd("scancel", "--signal=USR1", *(scancel_opts or ("--batch",)), job)
    slurm.wait_state(job, "SPECIAL_EXIT", "PENDING", timeout=90)
    info = slurm.show(job)
    assert info["Restarts"] == "1" and info["Reason"] == "JobHeldUser", slurm.why(job)
    assert info["ExitCode"].startswith("99"), slurm.why(job)


def move_and_release(slurm: Any, job: str, *where: str) -> None:
    """Move the held `job` (scontrol update fields: `where`) and release it, as the
    daemon does."""
    slurm.cmd("scontrol", "update", f"JobId={job}", *where)
    slurm.cmd("scontrol", "release", job)
    slurm.cmd("scontrol", "update", f"JobId={job}", "StartTime=now", check=False)


def two_rank_job(out: Path, partition: str) -> list[str]:
    """sbatch options for a requeueable job of two nodes, one rank each, meeting on
    loopback (the local cluster's nodes are all this machine), with its output appended
    in the new private folder `out` and its checkpoints in out/ck."""
    out.mkdir(mode=0o700)
    return [
        "-p", partition, "-N", "2", "--ntasks-per-node=1", "--requeue",
        "--open-mode=append", "-o", str(out / "slurm.out"), "--chdir", str(out),
        f"--export=ALL,MASTER_ADDR=127.0.0.1,MASTER_PORT={free_port()},"
        f"GAVEL_CHECKPOINT_DIR={out / 'ck'}",
    ]  # fmt: skip
