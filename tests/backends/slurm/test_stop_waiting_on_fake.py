"""A daemon stopping mid-act (SIGTERM) ends the act's wait for a preempted job at once
(the round waited out the job's grace, up to minutes, and a service manager's stop
timeout killed it before the acted round was logged), on the fake Slurm's clock. The
job is left running, signalled, and not requeue-held (its grace is not over); its move
fails with the reason, and a later act requeue-holds it once its grace is over.

What Slurm does that this leans on (a script that ignores the checkpoint signal runs
on; `requeuehold Incomplete` requeues and holds it) is pinned on 22.05, 24.11 and 26.05
by the contract scenario requeue_hold_and_checkpoint."""

from __future__ import annotations

from slurm_gavel.domain.cluster_model import JobPlacement, NodeSlice, RoundPlacement
from slurm_gavel.testing import FakeSlurm, OnSignal, Script, fake_backend

GRACE_S = 120.0


def on(round_index: int, job: str, node: str) -> RoundPlacement:
    gpu = node.split("-")[0]
    return RoundPlacement(round_index, 0.0, {job: JobPlacement(job, gpu, (NodeSlice(node, 1),))})


def test_a_stopping_daemon_ends_the_acts_wait_for_a_moving_job():
    slurm = FakeSlurm()
    job = slurm.submit("gavel:type=A3C", script=Script(on_signal=OnSignal.IGNORE))
    b = fake_backend(slurm, grace_s=GRACE_S)
    b.observe()
    assert b.act(on(0, job, "v100-1")).started == (job,)
    slurm.advance(1)
    b.observe()
    states = b.transport.states
    t0 = slurm.clock()

    def stop_after_2_s(ids):  # type: ignore[no-untyped-def]
        if slurm.clock() - t0 >= 2.0:  # what the daemon's SIGTERM handler calls
            b.stop_waiting()
        return states(ids)

    b.transport.states = stop_after_2_s  # type: ignore[method-assign]
    res = b.act(on(1, job, "p100-1"))  # a move: the act waits for the job to leave
    assert slurm.clock() - t0 < 5.0  # not its 120-s grace
    why = dict(res.failed).get(job, "")
    assert res.moved == () and why.startswith("the daemon is stopping"), res
    ran = slurm.job(job)
    assert (ran.state, ran.restarts, ran.alloc[0].node) == ("RUNNING", 0, "v100-1")
    kinds = [k for k, _ in b.transport.acts()]
    assert kinds.count("signal") == 1 and "requeuehold" not in kinds
    # still signalled: its grace is checked again, and enforced once it is over
    assert b.grace_due_in() is not None
    slurm.advance(GRACE_S)
    held, failed = b.enforce_grace()
    assert held == [job] and not failed
    assert slurm.job(job).state == "PENDING" and slurm.job(job).held
