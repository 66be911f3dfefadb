"""Job arrays through slurmrestd (the REST backend) on the real cluster of each release:
each task of `sbatch --array=0-3 --comment=gavel:...` is a managed job of its own
(ARRAY_TASK), placed, preempted (checkpoint signal, exit 99, requeue-held) and placed
again on its own, while the array's other tasks stay held. Before: the array was one
job; its placement and release freed every task, and the next placement failed ("Job
resizing not supported for job arrays"), the error pinned on another job.

The same round through the CLI transport runs on the fake Slurm
(test_arrays_on_fake.py); what Slurm does with a task the CLI's commands name is
pinned on each release by the contract scenario array_tasks."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from slurm_gavel.backends.slurm.rest.transport import rest_backend
from slurm_gavel.domain.cluster_model import JobPlacement, JobState, NodeSlice, RoundPlacement
from slurm_gavel_dev.localcluster_rest import rest_up

pytestmark = pytest.mark.slurm

JOB = str(Path(__file__).parents[1] / "jobs" / "checkpoint_job.sh")


def placed(round_index: int, jobs: dict[str, str]) -> RoundPlacement:
    """Each job on one GPU of the node named."""
    return RoundPlacement(
        round_index,
        time.time(),
        {j: JobPlacement(j, node.split("-")[0], (NodeSlice(node, 1),)) for j, node in jobs.items()},
    )


def states(cluster) -> dict[str, JobState]:
    return {o.job.id: o.state for o in cluster.observe().jobs}


def test_each_array_task_is_placed_preempted_and_resumed_on_its_own(slurm, tmp_path):
    """Through slurmrestd too: it refuses an update naming an array task ("Submit job
    update against Array Job's JobID instead of array task id"), so its transport acts
    on tasks through scontrol/scancel (cli_fallback)."""
    slurm.cancel_all()
    out = str(tmp_path / "%A_%a.out")
    array = slurm.sbatch("--array=0-3", "--comment=gavel:type=A3C", "-p", "gpu", "-o", out,
                         JOB, str(tmp_path / "ckpt"))  # fmt: skip
    task = [f"{array}_{t}" for t in range(4)]
    options = {"grace_s": 20.0, "poll_s": 0.2}
    b = rest_backend(rest_up(slurm.run_dir), env=slurm.env, **options)
    seen = states(b)
    assert {j: s for j, s in seen.items() if j.startswith(f"{array}_")} == {
        t: JobState.PENDING for t in task
    }, seen  # four held jobs, not one
    res = b.act(placed(0, {task[1]: "v100-1"}))
    assert res.started == (task[1],) and not res.failed, res
    slurm.wait_state(task[1], "RUNNING")
    for t in (task[0], task[2], task[3]):  # the other tasks: still held, not started
        assert slurm.state(t) == "PENDING" and slurm.show(t)["Priority"] == "0", slurm.why(t)
    assert slurm.show(task[1])["NodeList"] == "v100-1"
    time.sleep(1.5)  # its trap is set
    seen = states(b)
    assert seen[task[1]] is JobState.RUNNING and seen[task[2]] is JobState.PENDING, seen
    res = b.act(placed(1, {task[1]: "v100-1", task[2]: "p100-1"}))  # one more, one kept
    assert res.started == (task[2],) and res.kept == (task[1],) and not res.failed, res
    slurm.wait_state(task[2], "RUNNING")
    assert slurm.show(task[2])["NodeList"] == "p100-1"
    time.sleep(1.5)
    b.observe()
    res = b.act(placed(2, {task[2]: "p100-1"}))  # preempt task 1 alone
    assert res.preempted == (task[1],) and not res.failed, res
    slurm.wait_state(task[1], "PENDING", "SPECIAL_EXIT", timeout=40)  # checkpointed, held
    log = (tmp_path / "ckpt.log").read_text()
    assert log.count("checkpoint step=") == 1, log  # one signal, to task 1 alone
    assert slurm.state(task[2]) == "RUNNING"
    assert slurm.state(task[0]) == "PENDING" and slurm.show(task[0])["Priority"] == "0"
    seen = states(b)
    assert seen[task[1]] is JobState.HELD, seen  # preempted, its restart count kept
    res = b.act(placed(3, {task[2]: "p100-1", task[1]: "k80-1"}))  # resumed elsewhere
    assert res.started == (task[1],) and res.kept == (task[2],) and not res.failed, res
    slurm.wait_state(task[1], "RUNNING", timeout=40)
    assert slurm.show(task[1])["NodeList"] == "k80-1"
    assert int(slurm.show(task[1])["Restarts"]) >= 1
    assert slurm.state(task[3]) == "PENDING" and slurm.show(task[3])["Priority"] == "0"
    slurm.cancel_all()
