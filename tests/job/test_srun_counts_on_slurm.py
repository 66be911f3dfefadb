"""After a held job's node count changes, submitit's srun starts as many tasks as the
new allocation has: the batch environment keeps the submission's
SLURM_NTASKS, which slurm_gavel.job.submitit's srun function replaces with nodes x
tasks per node.

A bash job (no torch, so on every Slurm release): 2 nodes x 1 task, exits 99 and is
held; set to 1 node (``scontrol update NumNodes=1-1 NumTasks=1``, as for a moldable
job), released: its srun must start 1 task. A plain srun starts the 2 the submission
had on 22.05 and 1 on 24.11 and 26.05, which update the batch environment (also
checked, so the test shows where the function matters).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

pytest.importorskip("submitit")
from slurm_gavel.job.submitit import SRUN_FORWARDING

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

BODY = """
echo "run ${SLURM_RESTART_COUNT:-0}"
%s bash -c 'echo "task $SLURM_PROCID of $SLURM_NTASKS on $SLURMD_NODENAME"' | sort
[ "${SLURM_RESTART_COUNT:-0}" -ge 1 ] && exit 0
exit 99
"""


def _script(tmp: Path, name: str, forwarding: bool) -> Path:
    lines = ["#!/bin/bash", *(SRUN_FORWARDING if forwarding else ())]
    path = tmp / name
    launcher = "srun" if forwarding else "command srun"
    path.write_text("\n".join(lines) + BODY % launcher)
    path.chmod(0o755)
    return path


def _held(slurm, job: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + 90
    while True:
        info = slurm.show(job)
        if info["Restarts"] == "1" and info["Reason"] == "JobHeldUser":
            return
        assert time.monotonic() < deadline, slurm.why(job)
        time.sleep(0.3)


def test_srun_follows_a_changed_node_count(slurm, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    jobs = {}
    for name, forwarding, node in (("gavel", True, "p100-1"), ("plain", False, "p100-2")):
        out = tmp_path / f"{name}.out"
        job = slurm.sbatch(
            "-p", "v100", "-N", "2", "--ntasks-per-node=1", "--requeue", "--open-mode=append",
            "-o", str(out), str(_script(tmp_path, f"{name}.sh", forwarding)),
        )  # fmt: skip
        jobs[name] = (job, out, node)
    for job, _, node in jobs.values():
        _held(slurm, job)
        deadline = time.monotonic() + 20
        while True:  # 24.11 and 26.05 answer EAGAIN for a moment after the requeue
            res = slurm.cmd(
                "scontrol", "update", f"JobId={job}", "Partition=p100", "NumNodes=1-1",
                "NumTasks=1", f"NodeList={node}", check=False,
            )  # fmt: skip
            if "temporarily unavailable" not in res.stderr or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert res.returncode == 0, res.stderr
    time.sleep(1.5)  # no relaunch in the second of the requeue (backends/slurm/preemption.py)
    for job, _, _ in jobs.values():
        slurm.cmd("scontrol", "release", job)
        slurm.cmd("scontrol", "update", f"JobId={job}", "StartTime=now", check=False)
    for job, _, _ in jobs.values():
        slurm.wait_state(job, "COMPLETED", timeout=90)

    gavel = jobs["gavel"][1].read_text().split("run 1\n")[1].splitlines()
    assert [line for line in gavel if line.startswith("task")] == ["task 0 of 1 on p100-1"]
    plain = jobs["plain"][1].read_text().split("run 1\n")[1].splitlines()
    # 22.05 keeps the submission's SLURM_NTASKS in the batch environment; 24.11 and
    # 26.05 give the new count (there the function changes nothing)
    stale = ["task 0 of 2 on p100-2", "task 1 of 2 on p100-2"]
    fresh = ["task 0 of 1 on p100-2"]
    want = stale if slurm.spec.slurm == "22.05" else fresh
    assert [line for line in plain if line.startswith("task")] == want
    first = jobs["gavel"][1].read_text().split("run 1\n")[0]
    assert "task 0 of 2 on v100-1" in first and "task 1 of 2 on v100-2" in first
