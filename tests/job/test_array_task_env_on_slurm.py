"""An array task's environment names it as the daemon does: on each
release, the job library's report_id for a running task is `ARRAY_TASK`, the id the
daemon gives the task (backends/slurm/arrays.py), so its progress reports are matched
(tests/daemon/test_progress_array_task.py); its own SLURM_JOB_ID is another number
for all but one task of an array."""

from __future__ import annotations

import time

import pytest

from slurm_gavel.backends.slurm.cli.transport import cli_backend
from slurm_gavel.domain.cluster_model import JobPlacement, NodeSlice, RoundPlacement
from slurm_gavel.job.env import read_env

pytestmark = pytest.mark.slurm


def test_a_running_tasks_report_id_is_the_daemons_name_for_it(slurm, tmp_path):
    slurm.cancel_all()
    tmp_path.chmod(0o777)
    out = tmp_path / "env"
    script = f"env > {out}.$SLURM_ARRAY_TASK_ID; sleep 60"
    array = slurm.sbatch("--array=0-2", "--comment=gavel:type=A3C", "-p", "gpu",
                         "-o", "/dev/null", "--wrap", script)  # fmt: skip
    b = cli_backend(env=slurm.env, poll_s=0.2)
    names = {o.job.id for o in b.observe().jobs}
    task = f"{array}_1"
    assert task in names, names
    on = {task: JobPlacement(task, "v100", (NodeSlice("v100-1", 1),))}
    res = b.act(RoundPlacement(0, time.time(), on))
    assert res.started == (task,) and not res.failed, res
    slurm.wait_state(task, "RUNNING")
    env_file = tmp_path / "env.1"
    for _ in range(100):
        if env_file.exists() and "SLURM_ARRAY_TASK_ID" in env_file.read_text():
            break
        time.sleep(0.2)
    env = dict(line.split("=", 1) for line in env_file.read_text().splitlines() if "=" in line)
    got = read_env(env)
    assert got.report_id == task, (got, {k: v for k, v in env.items() if "JOB_ID" in k})
    assert got.job_id == env["SLURM_JOB_ID"]
    slurm.cancel_all()
