"""A requeued job waits until its previous run is provably gone: the
bookkeeping of slurm/old_runs.py over parsed observations, and the guard that keeps
a job whose checkpoint signal may have been lost from being requeue-held.

On the real cluster: tests/integration/test_node_outages.py."""

from __future__ import annotations

import pytest

from slurm_gavel.backends.slurm.backend import SlurmBackend
from slurm_gavel.backends.slurm.cli.transport import cli_backend
from slurm_gavel.backends.slurm.old_runs import OldRuns, kill_wait_seconds
from slurm_gavel.backends.slurm.records import RUNNING_STATES, SlurmJob, SlurmNode
from slurm_gavel.backends.slurm.view import SlurmView
from slurm_gavel.domain.cluster_model import ClusterSnapshot


def node(name="v100-1", state="mixed", flags=(), started=1000) -> SlurmNode:
    return SlurmNode(name, state, frozenset(flags), "v100", 4, 1, ("gpu",), "", started)


def job(state="RUNNING", nodes=("v100-1",), restarts=0, eligible=0) -> SlurmJob:
    return SlurmJob(
        job_id="7", state=state, reason="", comment="gavel:type=A3C",
        partitions=("gpu",), nodes=nodes if state != "PENDING" else (), gpu_request=None,
        gpu_slices=(), node_count=1, priority=1, restarts=restarts, submit_time=0,
        start_time=0, end_time=0, exit_code=None, account="", user="",
        eligible_time=eligible,
    )  # fmt: skip


def see(runs: OldRuns, n: SlurmNode, j: SlurmJob, t: float) -> None:
    runs.observe([n], [j], t, RUNNING_STATES)


def test_a_run_whose_nodes_always_answered_is_gone_when_slurm_says_so():
    runs = OldRuns(clear_s=10)
    see(runs, node(), job(), 0)
    see(runs, node(), job("COMPLETING", restarts=1), 5)
    waiting = job("PENDING", restarts=1, eligible=130)
    see(runs, node(), waiting, 10)
    assert runs.why_not_yet(waiting, 10) is None


def test_a_node_that_stopped_answering_holds_the_requeued_job_until_it_answered_long_enough():
    runs = OldRuns(clear_s=10)
    see(runs, node(), job(), 0)
    see(runs, node(flags={"NOT_RESPONDING"}), job(), 20)
    waiting = job("PENDING", restarts=1, eligible=60 + 121)  # Slurm: DOWN, requeued
    see(runs, node("v100-1", "down", {"NOT_RESPONDING"}), waiting, 60)
    assert "does not answer" in str(runs.why_not_yet(waiting, 60))
    see(runs, node("v100-1", "idle", started=1070), waiting, 70)  # slurmd is back
    assert "answered again 0s ago" in str(runs.why_not_yet(waiting, 70))
    assert runs.why_not_yet(waiting, 79) is not None
    assert runs.why_not_yet(waiting, 80) is None


def test_a_slurmd_restart_seen_only_in_its_start_time_counts_too():
    runs = OldRuns(clear_s=10)
    see(runs, node(), job(), 0)
    see(runs, node(started=1003), job("COMPLETING", restarts=1), 4)  # restarted meanwhile
    waiting = job("PENDING", restarts=1)
    see(runs, node(started=1003), waiting, 8)
    assert runs.why_not_yet(waiting, 8) is not None
    assert runs.why_not_yet(waiting, 14) is None


# Until Slurm's own EligibleTime (then elsewhere: the node takes none), or without one
# Slurm's usual delay (121 s) counted from the run's end.
@pytest.mark.parametrize("eligible, free_at", [(121, 121), (0, 151)])
def test_a_node_that_stays_down_holds_the_job_no_longer_than_slurm_would(eligible, free_at):
    runs = OldRuns(clear_s=10)
    see(runs, node(), job(), 0)
    waiting = job("PENDING", restarts=1, eligible=eligible)
    see(runs, node("v100-1", "down", {"NOT_RESPONDING"}), waiting, 30)
    assert runs.why_not_yet(waiting, free_at - 1) is not None
    assert runs.why_not_yet(waiting, free_at) is None


def test_a_new_run_forgets_the_old_ones_doubts_and_jobs_gone_are_forgotten():
    runs = OldRuns(clear_s=10)
    see(runs, node(), job(), 0)
    see(runs, node(flags={"NOT_RESPONDING"}), job(), 5)
    see(runs, node(started=1010), job(restarts=1, nodes=("v100-2",)), 100)
    assert runs.why_not_yet(job("PENDING", restarts=2), 101) is None
    runs.observe([node()], [], 200, RUNNING_STATES)
    assert not runs.runs


def test_kill_wait_from_scontrol_show_config():
    text = "JobRequeue              = 1\nKillWait                = 5 sec\nKillOnBadExit = 0\n"
    assert kill_wait_seconds(text) == 5
    assert kill_wait_seconds("nothing here") is None


def overdue_backend(now: float, grace: float) -> SlurmBackend:
    c = cli_backend(grace_s=grace, clock=lambda: now)
    snap = ClusterSnapshot(now, (), ())
    c.view = SlurmView(snap, {"7": job()}, {}, [])
    c.preemption.signal_sent["7"] = now - 1 - grace  # signalled grace + 1 s ago
    c.preemption.signalled["7"] = now - 1  # its grace ended 1 s ago
    c.transport.steps_answer = lambda ids: set(ids)  # type: ignore[method-assign]  # slurmd answers
    return c


def test_a_job_whose_signal_may_have_been_lost_is_not_requeue_held():
    """scancel --signal succeeds while the node's slurmd is down and the signal is
    lost: requeue-holding the job after the grace would throw its work away."""
    now, grace = 2000.0, 60.0
    sent = now - 1 - grace
    for n, lost in [
        (node(started=int(sent) - 100), False),  # slurmd up all along: requeue-hold
        (node(flags={"NOT_RESPONDING"}, started=int(sent) - 100), True),
        (node(started=int(sent) + 5), True),  # slurmd restarted after the signal
    ]:
        c = overdue_backend(now, grace)
        failed: dict[str, str] = {}
        reached = c.preemption._signal_reached(c.view, ["7"], {"v100-1": n}, failed)
        assert (reached == []) is lost, n
        if lost:
            assert "may not have reached it" in failed["7"] and "7" not in c.preemption.signalled


def test_a_job_whose_slurmd_does_not_answer_is_not_requeue_held_before_it_is_flagged():
    """A signal sent 1.5 s after a slurmd died was lost, and the job was
    requeue-held at its grace end, slurmctld not having flagged the node yet (its flag
    comes with a failed RPC or ping, sometimes after the grace). The batch host's
    slurmd is asked directly (steps_answer): no answer, no requeue-hold."""
    now, grace = 2000.0, 60.0
    sent = now - 1 - grace
    for answers, lost in [(True, False), (False, True)]:
        c = overdue_backend(now, grace)
        asked: list[list[str]] = []

        def probe(ids: list[str], answers: bool = answers, asked: list = asked) -> set[str]:
            asked.append(ids)
            return set(ids) if answers else set()

        c.transport.steps_answer = probe  # type: ignore[method-assign]
        c.transport.states = lambda ids: dict.fromkeys(ids, "RUNNING")  # type: ignore[method-assign]
        failed: dict[str, str] = {}
        up = node(started=int(sent) - 100)  # not flagged, no restart since the signal
        reached = c.preemption._signal_reached(c.view, ["7"], {"v100-1": up}, failed)
        assert asked == [["7"]] and (reached == []) is lost
        if lost:
            assert "slurmd on v100-1 does not answer now" in failed["7"]
            assert "7" not in c.preemption.signalled  # signalled again in a later round
    # a job that ended since has no step to ask: not in doubt (the Incomplete requeue-hold
    # leaves an ended job alone)
    c = overdue_backend(now, grace)
    c.transport.steps_answer = lambda ids: set()  # type: ignore[method-assign]
    c.transport.states = lambda ids: {}  # type: ignore[method-assign]
    up = node(started=int(sent) - 100)
    assert c.preemption._signal_reached(c.view, ["7"], {"v100-1": up}, {}) == ["7"]


def test_a_run_seen_over_before_its_node_restarted_is_not_held():
    """A job preempted the normal way (exit 99, epilog done: Slurm's proof) and seen
    waiting is not held back by a later slurmd restart on its old node (a rolling
    restart would otherwise hold every preempted job of the node)."""
    runs = OldRuns(clear_s=10)
    see(runs, node(), job(), 0)
    waiting = job("PENDING", restarts=1)
    see(runs, node(), waiting, 10)
    see(runs, node(started=1015), waiting, 20)
    assert runs.why_not_yet(waiting, 20) is None


def test_a_job_completing_when_the_round_looked_is_not_requeue_held():
    """A signalled job the round saw COMPLETING has left its run (it checkpointed, or
    finished during its grace): requeue-holding it would make Slurm run a finished job
    again. A job still RUNNING after its grace is requeue-held."""
    from slurm_gavel.domain.cluster_model import JobState, ObservedJob
    from slurm_gavel.domain.model import Job

    now, grace = 2000.0, 60.0
    for state, held in [("COMPLETING", False), ("RUNNING", True)]:
        c = overdue_backend(now, grace)
        assert c.view is not None
        c.view.managed["7"] = job(state)
        observed = (ObservedJob(Job("7", "A3C"), JobState.RUNNING),)  # as the snapshot maps both
        c.view = SlurmView(ClusterSnapshot(now, (), observed), c.view.managed, {}, [])
        calls: list[list[str]] = []
        c.transport.requeuehold = lambda ids, failed, calls=calls: calls.append(ids)  # type: ignore[method-assign,misc]
        assert c.preemption.requeuehold_overdue(c.view, {}) == ({"7"} if held else set()), state
        assert calls == ([["7"]] if held else []), state
