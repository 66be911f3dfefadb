"""Job arrays are first-class, on the fake Slurm: each task of `sbatch --array=0-3
--comment=gavel:...` is a managed job of its own (ARRAY_TASK), placed, preempted
(checkpoint signal, exit 99, held) and placed again on its own, while the array's
other tasks stay held; no command ever names the array itself (naming it would place
or release every task: "Job resizing not supported for job arrays").

What Slurm does that this leans on is pinned on 22.05, 24.11 and 26.05 by the contract
scenario array_tasks (the pending tasks, each a job; one placed and released alone runs
with a record of its own while the others stay held; the checkpoint signal naming one
task reaches it alone, and it runs again where placed next). The REST transport's way
of acting on a task (through scontrol and scancel) stays on real Slurm
(test_arrays_on_slurm.py)."""

from __future__ import annotations

from slurm_gavel.domain.cluster_model import JobPlacement, JobState, NodeSlice, RoundPlacement
from slurm_gavel.testing import FakeSlurm, fake_backend


def placed(round_index: int, jobs: dict[str, str]) -> RoundPlacement:
    """Each job on one GPU of the node named."""
    return RoundPlacement(
        round_index,
        0.0,
        {j: JobPlacement(j, node.split("-")[0], (NodeSlice(node, 1),)) for j, node in jobs.items()},
    )


def states(cluster) -> dict[str, JobState]:  # type: ignore[no-untyped-def]
    return {o.job.id: o.state for o in cluster.observe().jobs}


def test_each_array_task_is_placed_preempted_and_resumed_on_its_own():
    slurm = FakeSlurm()
    array = slurm.submit("gavel:type=A3C", array=range(4))
    task = [f"{array}_{t}" for t in range(4)]
    b = fake_backend(slurm, grace_s=20.0)
    assert states(b) == {t: JobState.PENDING for t in task}  # four held jobs, not one
    res = b.act(placed(0, {task[1]: "v100-1"}))
    assert res.started == (task[1],) and not res.failed, res
    slurm.advance(1)
    assert slurm.job(task[1]).state == "RUNNING"
    for t in (task[0], task[2], task[3]):  # the other tasks: still held, not started
        assert slurm.job(t).state == "PENDING" and slurm.job(t).held
    assert [a.node for a in slurm.job(task[1]).alloc] == ["v100-1"]
    slurm.advance(1.5)
    seen = states(b)
    assert seen[task[1]] is JobState.RUNNING and seen[task[2]] is JobState.PENDING, seen
    res = b.act(placed(1, {task[1]: "v100-1", task[2]: "p100-1"}))  # one more, one kept
    assert res.started == (task[2],) and res.kept == (task[1],) and not res.failed, res
    slurm.advance(1)
    assert [a.node for a in slurm.job(task[2]).alloc] == ["p100-1"]
    slurm.advance(1.5)
    b.observe()
    n = len(b.transport.acts())
    res = b.act(placed(2, {task[2]: "p100-1"}))  # preempt task 1 alone
    assert res.preempted == (task[1],) and not res.failed, res
    assert b.transport.acts()[n:] == [("signal", (task[1],))]  # one signal, to task 1
    assert slurm.job(task[1]).state == "SPECIAL_EXIT"  # checkpointed, held
    assert slurm.job(task[2]).state == "RUNNING"
    assert slurm.job(task[0]).state == "PENDING" and slurm.job(task[0]).held
    seen = states(b)
    assert seen[task[1]] is JobState.HELD, seen  # preempted, its restart count kept
    slurm.advance(1.5)
    res = b.act(placed(3, {task[2]: "p100-1", task[1]: "k80-1"}))  # resumed elsewhere
    assert res.started == (task[1],) and res.kept == (task[2],) and not res.failed, res
    slurm.advance(1)
    resumed = slurm.job(task[1])
    assert resumed.state == "RUNNING" and [a.node for a in resumed.alloc] == ["k80-1"]
    assert resumed.restarts == 1
    assert slurm.job(task[3]).state == "PENDING" and slurm.job(task[3]).held
    named = {j for _, ids in b.transport.log for j in ids}
    assert array not in named  # naming the array would release every task
