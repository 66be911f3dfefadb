"""SlurmBackend's own logic on the fake Slurm (moved from test_backend.py, which keeps
what only the real cluster shows: the CLI transport's commands, their batching and
splitting, a real checkpointing script resumed at its step, and unmanaged jobs left
untouched): a move, the requeue-hold of a job that ignores the signal by the next act,
a non-blocking preemption, a released job Slurm has not started held again, a bad
placement failing alone, a malformed comment, a drained node.

What Slurm does that these lean on is pinned on 22.05, 24.11 and 26.05 by the contract
scenarios place_and_release, requeue_hold_and_checkpoint, hold_a_released_job,
held_on_arrival (the comment read back as Slurm keeps it) and drained_node."""

from __future__ import annotations

import pytest

from slurm_gavel.domain.cluster_model import (
    JobState,
    NodeState,
)
from slurm_gavel.testing import FakeSlurm, OnSignal, Script, fake_backend
from tests.backends.slurm.placements import placement

IGNORES = Script(on_signal=OnSignal.IGNORE)


def kinds(backend) -> list[str]:  # type: ignore[no-untyped-def]
    return [k for k, _ in backend.transport.acts()]


@pytest.fixture
def slurm():
    return FakeSlurm()


def test_move_preempts_and_restarts_on_the_new_place(slurm):
    job = slurm.submit("gavel:type=A3C,scale=1")
    b = fake_backend(slurm, grace_s=10.0)
    b.observe()
    b.act(placement(0, {job: ("v100", [("v100-2", 1)])}))
    slurm.advance(1)
    b.observe()
    res = b.act(placement(1, {job: ("p100", [("p100-1", 1)])}))
    assert res.moved == (job,) and not res.failed, res
    slurm.advance(1)
    moved = slurm.job(job)
    assert moved.state == "RUNNING" and [a.node for a in moved.alloc] == ["p100-1"]
    assert moved.restarts == 1


def test_job_ignoring_the_signal_is_requeue_held_after_the_grace(slurm):
    job = slurm.submit("gavel:type=A3C", script=IGNORES)
    b = fake_backend(slurm, grace_s=1.0)
    b.observe()
    b.act(placement(0, {job: ("k80", [("k80-2", 1)])}))
    slurm.advance(1)
    b.observe()
    res = b.act(placement(1, {}))
    assert res.preempted == (job,) and "requeuehold" not in kinds(b)  # no wait
    slurm.advance(1.5)  # its 1-s grace is over; it ignored the signal
    assert slurm.job(job).state == "RUNNING"
    b.observe()
    res = b.act(placement(2, {}))  # the next act requeue-holds it
    assert res.preempted == (job,) and not res.failed, res
    assert kinds(b).count("requeuehold") == 1 and kinds(b).count("signal") == 1
    obs = {j.job.id: j for j in b.observe().jobs}[job]
    assert obs.state is JobState.HELD and obs.restarts == 1


def test_non_blocking_preempt_requeue_holds_overdue_jobs_next_act(slurm):
    job = slurm.submit("gavel:type=A3C", script=IGNORES)
    other = slurm.submit("gavel:type=A3C")
    b = fake_backend(slurm, grace_s=1.0, wait_for_preempted=False)
    b.observe()
    b.act(placement(0, {job: ("v100", [("v100-1", 4)])}))
    slurm.advance(1)
    b.observe()
    t = slurm.clock()
    # a start that needs its GPUs: not waited for, started in a later act
    res = b.act(placement(1, {other: ("v100", [("v100-1", 4)])}))
    assert res.preempted == (job,) and slurm.clock() == t  # did not wait
    assert b.transport.issued("wait") == [] and "requeuehold" not in kinds(b)
    slurm.advance(1.2)
    b.observe()
    b.act(placement(2, {other: ("v100", [("v100-1", 4)])}))  # its grace has passed
    assert kinds(b).count("requeuehold") == 1
    assert slurm.job(job).state == "PENDING" and slurm.job(job).held


def test_released_job_that_could_not_start_is_held_again_when_not_placed(slurm):
    blocker = slurm.submit(partition="k80", nodelist=["k80-1"], gres="gpu:k80:4")
    slurm.advance(1)
    assert slurm.job(blocker).state == "RUNNING"
    job = slurm.submit("gavel:type=A3C")
    b = fake_backend(slurm)
    b.observe()
    b.act(placement(0, {job: ("k80", [("k80-1", 1)])}))  # released, waits for GPUs
    slurm.advance(1)
    assert slurm.job(job).state == "PENDING" and not slurm.job(job).held
    b.observe()
    b.act(placement(1, {}))
    assert kinds(b).count("hold") == 1
    assert slurm.job(job).held and slurm.job(job).reason == "JobHeldAdmin"


def test_bad_placements_fail_without_touching_others(slurm):
    job = slurm.submit("gavel:type=A3C,scale=3")
    ok = slurm.submit("gavel:type=A3C,scale=1")
    b = fake_backend(slurm)
    b.observe()
    res = b.act(
        placement(0, {job: ("v100", [("v100-1", 2), ("v100-2", 1)]), ok: ("v100", [("v100-1", 1)])})
    )
    assert "uneven" in dict(res.failed)[job]
    assert res.started == (ok,)
    assert job not in {j for _, ids in b.transport.acts() for j in ids}
    assert slurm.job(job).held


def test_malformed_comment_is_a_warning_and_not_managed(slurm):
    job = slurm.submit("gavel:type=A3C")
    # job_submit.lua refuses it at submit; a job from before the Lua can still hold one
    slurm.job(job).comment = "gavel:type=A3C,scale=zero"
    b = fake_backend(slurm)
    snap = b.observe()
    assert job not in {j.job.id for j in snap.jobs}
    assert any(f"job {job}" in w and "scale" in w for w in b.warnings)


def test_drained_node_is_reported_drained(slurm):
    slurm.drain("p100-1", "test")
    snap = fake_backend(slurm).observe()
    p1 = next(n for n in snap.nodes if n.name == "p100-1")
    assert p1.state is NodeState.DRAINED and p1.usable_gpus == 0
    assert snap.capacity()["p100"] == 4
