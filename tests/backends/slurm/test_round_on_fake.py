"""SlurmBackend's round on the fake Slurm (slurm_gavel.testing): which commands a round
issues for a placement, for which jobs, in which order; holds and releases, moves and
the checkpoint signal, the grace and its requeue-hold, arrays, eligibility, the owner's
holds, give-back and errors. In milliseconds: the fake's behaviours these tests lean on
are pinned against each real release by tests/testing/test_contract_on_slurm.py, and the
end-to-end paths stay tested on real Slurm (test_backend.py and the *_on_slurm.py)."""

from __future__ import annotations

import pytest

from slurm_gavel.backends.slurm.reservations import SlurmReservation
from slurm_gavel.backends.slurm.slurm_errors import SlurmUnreachable
from slurm_gavel.core.round_jobs import WAITING_ON_CLUSTER
from slurm_gavel.domain.cluster_model import JobState
from slurm_gavel.testing import FakeSlurm, OnSignal, Script, fake_backend
from tests.backends.slurm.placements import placement

IGNORES = Script(on_signal=OnSignal.IGNORE)


def states(backend) -> dict[str, JobState]:
    return {o.job.id: o.state for o in backend.observe().jobs}


def named(backend) -> set[str]:
    """Every job id any command of the backend named."""
    return {j for _, ids in backend.transport.log for j in ids}


@pytest.fixture
def slurm():
    return FakeSlurm()


def test_a_round_places_then_releases_only_the_jobs_it_starts(slurm):
    a = slurm.submit("gavel:type=A3C", gres="gpu:2")
    b = slurm.submit("gavel:type=A3C,scale=1")
    plain = slurm.submit(gres="gpu:k80:1")
    backend = fake_backend(slurm)
    assert states(backend) == {a: JobState.PENDING, b: JobState.PENDING}
    res = backend.act(placement(0, {a: ("v100", [("v100-1", 2)])}))
    assert res.started == (a,) and not res.failed
    assert backend.transport.acts() == [("place", (a,)), ("release", (a,))]
    slurm.advance(1)
    assert states(backend) == {a: JobState.RUNNING, b: JobState.PENDING}
    assert slurm.job(a).alloc[0].node == "v100-1"
    # the same placement next round: the lease is kept, no command at all
    before = len(backend.transport.acts())
    res = backend.act(placement(1, {a: ("v100", [("v100-1", 2)])}))
    assert res.kept == (a,) and len(backend.transport.acts()) == before
    assert plain not in named(backend)


def test_a_released_job_slurm_has_not_started_is_kept_then_held_when_not_placed(slurm):
    blocker = slurm.submit(gres="gpu:v100:4")  # a plain job holds every GPU of v100-1
    slurm.advance(1)
    a = slurm.submit("gavel:type=A3C,scale=1")
    backend = fake_backend(slurm)
    backend.observe()
    where = {a: ("v100", [("v100-1", 1)])}
    assert backend.act(placement(0, where)).started == (a,)
    slurm.advance(1)
    assert states(backend) == {a: JobState.PENDING}  # released, waits for the GPU
    assert slurm.job(a).reason == "Resources"
    n = len(backend.transport.acts())
    assert backend.act(placement(1, where)).kept == (a,)  # not updated again (a race)
    assert len(backend.transport.acts()) == n
    # still waiting a round later: kept again (the kept lease is remembered, not only
    # the last act's starts: 26.05 under load refused the second update of such jobs,
    # "Invalid node name specified", and of one Slurm had started meanwhile)
    slurm.advance(1)
    backend.observe()
    assert backend.act(placement(2, where)).kept == (a,)
    assert len(backend.transport.acts()) == n
    backend.observe()
    backend.act(placement(3, {}))
    assert backend.transport.acts()[n:] == [("hold", (a,))]
    assert slurm.job(a).held
    assert blocker not in named(backend)


def running(
    slurm, job: str, where: tuple[str, list[tuple[str, int]]], after: float = 5.0, **backend_options
):
    """A backend that placed ``job`` on ``where`` (gpu type, [(node, gpus)]) in round 0
    and observed it again ``after`` seconds later, running there."""
    backend = fake_backend(slurm, **backend_options)
    backend.observe()
    backend.act(placement(0, {job: where}))
    slurm.advance(after)
    backend.observe()
    return backend  # fmt: skip


def test_a_preempted_job_that_checkpoints_is_held_and_restarts_elsewhere(slurm):
    a = slurm.submit("gavel:type=A3C,scale=1")
    b = slurm.submit("gavel:type=A3C,scale=1")
    backend = running(slurm, a, ("v100", [("v100-1", 1)]), grace_s=30)
    res = backend.act(placement(1, {b: ("v100", [("v100-1", 1)])}))
    assert res.preempted == (a,) and res.started == (b,)
    kinds = [k for k, _ in backend.transport.acts()[2:]]
    assert sorted(kinds) == ["place", "release", "signal"]  # the signal beside the start
    slurm.advance(1)
    assert states(backend) == {a: JobState.HELD, b: JobState.RUNNING}
    assert slurm.job(a).state == "SPECIAL_EXIT" and slurm.job(a).restarts == 1
    slurm.advance(2)
    backend.observe()
    res = backend.act(placement(2, {a: ("p100", [("p100-1", 1)]), b: ("v100", [("v100-1", 1)])}))
    assert res.started == (a,) and res.kept == (b,)
    slurm.advance(1)
    assert slurm.job(a).alloc[0].node == "p100-1"


def test_a_move_waits_for_the_job_to_leave_and_starts_it_in_the_same_act(slurm):
    a = slurm.submit("gavel:type=A3C,scale=2")
    backend = running(slurm, a, ("v100", [("v100-1", 2)]), grace_s=30)
    res = backend.act(placement(1, {a: ("k80", [("k80-2", 2)])}))
    assert res.moved == (a,) and not res.failed
    kinds = [k for k, _ in backend.transport.acts()[2:]]
    assert kinds[0] == "signal" and kinds[-2:] == ["place", "release"]
    slurm.advance(1)
    assert [x.node for x in slurm.job(a).alloc] == ["k80-2"]
    assert slurm.job(a).restarts == 1


def test_a_signalled_move_that_does_not_start_counts_as_a_preemption(slurm):
    """The job left its GPUs on the signal (Slurm counts a restart), but its start on the
    new GPUs failed: the round still reports it stopped, so every restart Slurm counts
    is one the daemon's log and metrics count (CI under load: Slurm counted 36 restarts
    where the rounds logged 34)."""
    a = slurm.submit("gavel:type=A3C,scale=2")
    backend = running(slurm, a, ("v100", [("v100-1", 2)]), grace_s=30)
    backend.transport.refuse("place", a, "Requested node configuration is not available")
    res = backend.act(placement(1, {a: ("k80", [("k80-2", 2)])}))
    assert slurm.job(a).restarts == 1  # it was signalled and checkpointed
    assert res.moved == () and a in dict(res.failed)
    assert res.preempted == (a,)


def test_a_job_that_ignores_the_signal_is_requeue_held_after_its_grace(slurm):
    a = slurm.submit("gavel:type=A3C,grace=20", script=IGNORES)
    backend = running(slurm, a, ("v100", [("v100-1", 1)]), grace_s=60)
    res = backend.act(placement(1, {}))
    assert res.preempted == (a,)
    assert backend.grace_due_in() == pytest.approx(20)  # its own grace, not the default
    slurm.advance(10)
    assert backend.enforce_grace() == ([], {})  # not due yet: nothing issued
    assert "requeuehold" not in [k for k, _ in backend.transport.acts()]
    slurm.advance(11)
    assert backend.grace_due_in() <= 0
    held, failed = backend.enforce_grace()
    assert held == [a] and not failed
    assert backend.transport.acts()[-1] == ("requeuehold", (a,))
    assert states(backend) == {a: JobState.HELD}
    assert slurm.job(a).restarts == 1


def test_a_fresh_run_is_not_signalled_until_the_next_round(slurm):
    a = slurm.submit("gavel:type=A3C")
    backend = running(slurm, a, ("v100", [("v100-1", 1)]), after=2, fresh_run_s=5.0)
    res = backend.act(placement(1, {}))
    assert "too soon" in dict(res.failed)[a] and "signal" not in named_kinds(backend)
    slurm.advance(5)
    backend.observe()
    assert backend.act(placement(2, {})).preempted == (a,)


def named_kinds(backend) -> list[str]:
    return [k for k, _ in backend.transport.acts()]


def test_an_arrays_tasks_are_placed_one_by_one_and_the_array_is_never_named(slurm):
    arr = slurm.submit("gavel:type=A3C,scale=1", array=range(4))
    backend = fake_backend(slurm)
    assert set(states(backend)) == {f"{arr}_{t}" for t in range(4)}
    res = backend.act(placement(0, {f"{arr}_2": ("k80", [("k80-1", 1)]),
                                    f"{arr}_0": ("p100", [("p100-1", 1)])}))  # fmt: skip
    assert sorted(res.started) == [f"{arr}_0", f"{arr}_2"]
    slurm.advance(1)
    seen = states(backend)
    assert seen[f"{arr}_2"] is JobState.RUNNING and seen[f"{arr}_1"] is JobState.PENDING
    assert arr not in named(backend)  # naming the array would release every task


def test_a_job_slurm_would_not_start_is_never_placed(slurm):
    first = slurm.submit(gres="gpu:k80:1", script=Script(runs_s=30))
    after = slurm.submit("gavel:type=A3C", dependency=f"afterok:{first}")
    later = slurm.submit("gavel:type=A3C", begin=slurm.clock() + 3600)
    backend = fake_backend(slurm)
    waiting = {o.job.id: o.waiting_on for o in backend.observe().jobs}
    assert f"afterok:{first}(unfulfilled)" in str(waiting[after])
    assert "begin time" in str(waiting[later])
    res = backend.act(placement(0, {after: ("v100", [("v100-1", 1)]),
                                    later: ("v100", [("v100-2", 1)])}))  # fmt: skip
    assert not res.started and all(why.startswith(WAITING_ON_CLUSTER) for _, why in res.failed)
    assert backend.transport.acts() == []
    # held, its dependency is re-checked only by Slurm's periodic pass
    slurm.advance(31)
    assert slurm.job(after).dependency == [("afterok", first, "unfulfilled")]
    slurm.advance(60)
    waiting = {o.job.id: o.waiting_on for o in backend.observe().jobs}
    assert waiting[after] is None


def test_a_job_its_owner_holds_is_never_placed_and_a_requeuehold_is_marked_theirs(slurm):
    a = slurm.submit("gavel:type=A3C", hold=True)  # sbatch --hold
    b = slurm.submit("gavel:type=A3C")
    assert slurm.job(a).comment == "gavel:type=A3C,hold=user"
    backend = fake_backend(slurm)
    waiting = {o.job.id: o.waiting_on for o in backend.observe().jobs}
    assert "held by you" in str(waiting[a])
    backend.act(placement(0, {b: ("v100", [("v100-1", 1)])}))
    slurm.advance(5)
    backend.observe()
    slurm.owner.requeuehold(b)  # the owner stops the run: not the daemon's preemption
    backend.observe()
    assert slurm.job(b).comment == "gavel:type=A3C,hold=user"
    assert backend.transport.acts()[-1] == ("give_back", (b,))
    res = backend.act(placement(1, {b: ("v100", [("v100-1", 1)])}))
    assert "held by you" in dict(res.failed)[b] and not res.started
    slurm.owner.release(b)
    assert slurm.job(b).comment == "gavel:type=A3C" and slurm.job(b).held  # the daemon's now


def test_a_held_job_outside_the_managed_partitions_is_given_back(slurm):
    a = slurm.submit("gavel:type=A3C,scale=2", partition="k80")
    b = slurm.submit("gavel:type=A3C,scale=1", partition="k80", hold=True)
    backend = fake_backend(slurm, managed_partitions={"gpu"})
    assert backend.observe().jobs == ()
    assert set(backend.refused_held) == {a, b}
    assert backend.give_back(backend.refused_held) == {}
    assert [k for k, _ in backend.transport.acts()] == ["give_back", "give_back", "release"]
    assert backend.transport.acts()[-1] == ("release", (a,))  # b stays its owner's
    slurm.advance(1)
    job = slurm.job(a)
    assert job.state == "RUNNING" and job.comment.startswith("gavel-released: ")
    assert job.gres == (None, 2) and job.alloc[0].gpus == 2
    assert slurm.job(b).held


def test_one_jobs_refused_update_fails_it_alone(slurm):
    a = slurm.submit("gavel:type=A3C")
    b = slurm.submit("gavel:type=A3C")
    backend = fake_backend(slurm)
    backend.observe()
    backend.transport.refuse("place", a, "Invalid node name specified")
    res = backend.act(placement(0, {a: ("v100", [("v100-1", 1)]), b: ("v100", [("v100-2", 1)])}))
    assert res.started == (b,) and dict(res.failed) == {a: "Invalid node name specified"}
    assert backend.transport.acts()[-1] == ("release", (b,))  # a is never released
    slurm.advance(1)
    assert slurm.job(a).held and slurm.job(b).state == "RUNNING"


def test_an_unreachable_slurm_raises_and_the_next_round_reads_it_again(slurm):
    a = slurm.submit("gavel:type=A3C")
    backend = fake_backend(slurm)
    backend.transport.unreachable = True
    with pytest.raises(SlurmUnreachable):
        backend.observe()
    backend.transport.unreachable = False
    assert states(backend) == {a: JobState.PENDING}


def test_a_finished_job_is_reported_done_once_with_how_it_ended(slurm):
    ok = slurm.submit("gavel:type=A3C", script=Script(runs_s=10))
    bad = slurm.submit("gavel:type=A3C", script=Script(runs_s=10, exit_code=3))
    backend = fake_backend(slurm)
    backend.observe()
    backend.act(placement(0, {ok: ("v100", [("v100-1", 1)]), bad: ("v100", [("v100-1", 1)])}))
    slurm.advance(15)
    done = {o.job.id: o for o in backend.observe().jobs}
    assert done[ok].state is JobState.DONE and done[ok].succeeded
    assert done[bad].state is JobState.DONE and not done[bad].succeeded
    assert backend.transport.issued("ended") == [("ended", (ok, bad))]
    assert backend.observe().jobs == ()  # reported once


def test_the_fakes_reservations_keep_their_nodes_from_jobs_they_do_not_admit(slurm):
    """The fake answers read_reservations (none unless a test sets them): the backend
    reads them every observe, with no 'could not be read' warning, and keeps a reserved
    node from a job the reservation does not admit."""
    a = slurm.submit("gavel:type=A3C,scale=1")
    backend = fake_backend(slurm)
    backend.observe()
    assert ("reservations", ()) in backend.transport.issued("reservations")
    assert not [w for w in backend.warnings if "reservations" in w]
    (job,) = backend.observe().jobs
    assert job.allowed is None or "v100-1" in job.allowed.nodes
    maint = SlurmReservation(
        "maint", frozenset({"v100-1"}), start=0, end=0, users=("someone-else",)
    )
    backend.transport.reservations = [maint]
    (job,) = backend.observe().jobs
    assert job.job.id == a and job.allowed is not None
    assert "v100-1" not in job.allowed.nodes and "maint" in job.allowed.why
    assert not [w for w in backend.warnings if "reservations" in w]
