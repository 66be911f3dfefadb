"""Per-job grace on the fake Slurm (slurm_gavel.testing), on its clock: jobs that ignore
the checkpoint signal are requeue-held each after its own grace (grace= in the comment,
capped by the admin's maximum), not all after the longest one, by the first act after
it ends or by enforce_grace between rounds; a run too young for the signal is
preempted a round later; a job that ended just before its requeue-hold is not run
again.

What Slurm does that these lean on is pinned on 22.05, 24.11 and 26.05 by the contract
scenarios (tests/testing/contract_scenarios.py): requeue_hold_and_checkpoint (a script
ignoring the signal runs on; `requeuehold Incomplete` requeues and holds a running job,
one restart; a script that saves exits 99, SPECIAL_EXIT), signal_without_a_handler (a
script without a handler dies of the signal: FAILED, no requeue) and runs_end (an ended
job is left as it is by `requeuehold Incomplete`, without an error). The REST
transport's side of the last race stays on real Slurm (test_grace_on_slurm.py)."""

from __future__ import annotations

import pytest

from slurm_gavel.domain.cluster_model import JobPlacement, JobState, NodeSlice, RoundPlacement
from slurm_gavel.testing import FakeSlurm, OnSignal, Script, fake_backend

IGNORES = Script(on_signal=OnSignal.IGNORE)


def placement(round_index: int, jobs: list[str]) -> RoundPlacement:
    return RoundPlacement(
        round_index,
        0.0,
        {j: JobPlacement(j, "v100", (NodeSlice("v100-1", 1),)) for j in jobs},
    )


@pytest.fixture
def slurm():
    return FakeSlurm()


def test_each_job_is_requeue_held_after_its_own_grace(slurm):
    # fresh_run_s=0: preempted 1 s after they start (a test below is about that guard)
    cluster = fake_backend(slurm, grace_s=1.0, max_grace_s=7.0, fresh_run_s=0.0)
    default, short, long_, capped = (
        slurm.submit(f"gavel:type=A3C{g}", script=IGNORES)
        for g in ("", ",grace=3", ",grace=7", ",grace=3600")
    )
    jobs = [default, short, long_, capped]
    cluster.observe()
    cluster.act(placement(0, jobs))
    slurm.advance(1)
    assert all(slurm.job(j).state == "RUNNING" for j in jobs)
    held_after: dict[str, float] = {}
    requeuehold = cluster.transport.requeuehold

    def timed(ids, failed):  # type: ignore[no-untyped-def]
        held_after.update({j: slurm.clock() - start for j in ids})
        requeuehold(ids, failed)

    cluster.transport.requeuehold = timed  # type: ignore[method-assign]
    cluster.observe()
    start = slurm.clock()
    res = cluster.act(placement(1, []))
    assert sorted(res.preempted) == sorted(jobs) and not dict(res.failed)
    # No start needs their GPUs: the act returned after the signal. The acts that
    # follow (one every 0.5 s) requeue-hold each once its own grace is over.
    assert not held_after and cluster.transport.issued("wait") == []
    for k in range(2, 40):
        if len(held_after) == len(jobs):
            break
        slurm.advance(0.5)
        cluster.observe()
        cluster.act(placement(k, []))
    # each by the first act at or after its own deadline, not at the longest
    assert held_after == {default: 1.0, short: 3.0, long_: 7.0, capped: 7.0}  # 3600: capped
    assert [k for k, _ in cluster.transport.acts()].count("signal") == 1
    obs = {o.job.id: o for o in cluster.observe().jobs}
    for j in jobs:
        assert slurm.job(j).state == "PENDING" and slurm.job(j).held
        assert obs[j].state is JobState.HELD and obs[j].restarts == 1


def test_between_rounds_a_job_is_requeue_held_when_its_grace_ends(slurm):
    """No act follows the preempting one for a whole round (6 minutes by default):
    the daemon's loop calls enforce_grace() when grace_due_in() says a grace ended,
    and the job that ignores the signal is requeue-held then. A job that exits on the
    signal is left alone, and each job is looked at once (a second call runs nothing)."""
    cluster = fake_backend(slurm, grace_s=2.0, fresh_run_s=0.0)
    ignoring = slurm.submit("gavel:type=A3C", script=IGNORES)
    exiting = slurm.submit("gavel:type=A3C", script=Script(on_signal=OnSignal.CHECKPOINT))
    assert cluster.grace_due_in() is None
    cluster.observe()
    cluster.act(placement(0, [ignoring, exiting]))
    slurm.advance(1)
    cluster.observe()
    res = cluster.act(placement(1, []))
    assert sorted(res.preempted) == sorted([ignoring, exiting]) and not dict(res.failed)
    assert cluster.grace_due_in() == pytest.approx(2.0)
    assert cluster.enforce_grace() == ([], {})  # not due yet: no command
    assert "requeuehold" not in [k for k, _ in cluster.transport.acts()]
    slurm.advance(1.9)
    assert cluster.enforce_grace() == ([], {})
    slurm.advance(0.1)
    before = cluster.commands_issued
    held, failed = cluster.enforce_grace()
    assert held == [ignoring] and not failed, (held, failed)
    assert cluster.transport.acts()[-1] == ("requeuehold", (ignoring,))
    assert cluster.grace_due_in() is None  # each job looked at once
    ran = cluster.commands_issued - before
    assert cluster.enforce_grace() == ([], {}) and cluster.commands_issued - before == ran
    job = slurm.job(ignoring)
    assert (job.state, job.restarts, job.held) == ("PENDING", 1, True)
    assert slurm.job(exiting).state == "SPECIAL_EXIT"  # it exited 99 on the signal
    obs = {o.job.id: o for o in cluster.observe().jobs}
    assert obs[ignoring].restarts == 1 and obs[exiting].restarts == 1
    n = len(cluster.transport.acts())
    cluster.act(placement(2, []))  # the next act finds nothing left to requeue-hold
    assert cluster.transport.acts()[n:] == []


def test_a_run_without_its_handler_yet_dies_of_the_signal(slurm):
    """Why fresh_run_s: a batch script that has not set its trap yet (bash starting up,
    a prolog, Python importing torch before the job library's handler) dies of the
    signal's default action: FAILED, not requeued (CI, 26.05: signalled 12 ms after its
    launch). With no guard, that is what the preemption does."""
    cluster = fake_backend(slurm, grace_s=10.0, fresh_run_s=0.0)
    job = slurm.submit("gavel:type=A3C", script=Script(on_signal=OnSignal.DIE))
    cluster.observe()
    cluster.act(placement(0, [job]))
    slurm.advance(0.5)
    cluster.observe()
    assert cluster.act(placement(1, [])).preempted == (job,)
    assert (slurm.job(job).state, slurm.job(job).restarts) == ("FAILED", 0)


def test_a_job_preempted_in_its_first_seconds_is_signalled_a_round_later(slurm):
    """A run younger than fresh_run_s is not signalled (its script may not handle the
    signal yet); the next act, later, checkpoints it."""
    cluster = fake_backend(slurm, grace_s=10.0, fresh_run_s=5.0)
    job = slurm.submit("gavel:type=A3C", script=Script(on_signal=OnSignal.CHECKPOINT))
    cluster.observe()
    assert cluster.act(placement(0, [job])).started == (job,)
    slurm.advance(1)
    cluster.observe()
    res = cluster.act(placement(1, []))
    why = dict(res.failed).get(job, "")
    assert not res.preempted and "too soon for the checkpoint signal" in why, res
    assert cluster.transport.issued("signal") == [] and slurm.job(job).state == "RUNNING"
    slurm.advance(3.9)  # 4.9 s into its run: still too soon
    cluster.observe()
    assert not cluster.act(placement(2, [])).preempted
    slurm.advance(0.1)
    cluster.observe()
    res = cluster.act(placement(3, []))
    assert res.preempted == (job,) and not dict(res.failed), res
    ran = slurm.job(job)
    assert (ran.state, ran.restarts, ran.exit_code) == ("SPECIAL_EXIT", 1, 99)


def test_a_job_that_ends_just_before_its_requeue_hold_is_not_run_again(slurm):
    """The race CI hit (24.11): a job ignores the signal, is seen RUNNING when its grace
    ends, and finishes before the requeue-hold reaches slurmctld (here: while the
    backend reads the nodes, the step between the two). Slurm requeues even a batch
    job that has ended unless told `Incomplete`; the daemon's requeue-hold must not
    requeue it, or the finished job runs again from its last checkpoint."""
    cluster = fake_backend(slurm, grace_s=1.0, fresh_run_s=0.0)
    job = slurm.submit("gavel:type=A3C", script=Script(runs_s=4, on_signal=OnSignal.IGNORE))
    cluster.observe()
    cluster.act(placement(0, [job]))
    slurm.advance(1)
    cluster.observe()
    assert cluster.act(placement(1, [])).preempted == (job,)
    read_nodes = cluster.transport.read_nodes

    def after_the_job_ended():  # type: ignore[no-untyped-def]
        slurm.advance(3)
        assert slurm.job(job).state == "COMPLETED"
        return read_nodes()

    slurm.advance(cluster.grace_due_in() or 0.0)
    assert slurm.job(job).state == "RUNNING"
    cluster.transport.read_nodes = after_the_job_ended  # type: ignore[method-assign]
    held, failed = cluster.enforce_grace()
    assert held == [job] and not failed, (held, failed)  # seen RUNNING: the command went
    assert cluster.transport.acts()[-1] == ("requeuehold", (job,))
    ended = slurm.job(job)
    assert (ended.state, ended.restarts, ended.exit_code) == ("COMPLETED", 0, 0)
