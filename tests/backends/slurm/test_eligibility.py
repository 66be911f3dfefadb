"""Jobs Slurm would not start are given no GPUs (eligibility.py): a
dependency, a begin time, a limit Slurm names; the round skips them, says why, and the
act never places one. The Slurm-side facts are checked on every release in
test_eligibility_on_slurm.py."""

from __future__ import annotations

from dataclasses import replace

from slurm_gavel.backends.slurm.act_plan import plan_act
from slurm_gavel.backends.slurm.eligibility import (
    SINGLETON,
    HeldBack,
    limit_reason,
    singleton_free,
    waiting_on,
)
from slurm_gavel.backends.slurm.giveback import refused_held
from slurm_gavel.backends.slurm.records import SlurmJob, SlurmNode
from slurm_gavel.backends.slurm.view import build_view
from slurm_gavel.core.skips import WAITING_ON_CLUSTER
from slurm_gavel.daemon.status_view import why
from slurm_gavel.domain.cluster_model import JobPlacement, NodeSlice, RoundPlacement

NOW = 10_000.0


def job(
    job_id="7", state="PENDING", reason="JobHeldUser", priority=0, restarts=0, eligible=0, dep=""
) -> SlurmJob:
    return SlurmJob(
        job_id=job_id, state=state, reason=reason, comment="gavel:type=A3C",
        partitions=("gpu",), nodes=(), gpu_request=("v100", 1), gpu_slices=(), node_count=1,
        priority=priority, restarts=restarts, submit_time=0, start_time=0, end_time=0,
        exit_code=None, account="", user="u", eligible_time=eligible, dependency=dep,
    )  # fmt: skip


def test_a_job_slurm_would_start_waits_on_nothing():
    assert waiting_on(job(), NOW, {}) is None
    assert waiting_on(job(reason="Resources", priority=1), NOW, {}) is None  # a placement's
    assert waiting_on(job(reason="ReqNodeNotAvail", priority=1), NOW, {}) is None


def test_a_dependency_keeps_a_job_out_until_slurm_clears_it():
    assert "afterok:5(unfulfilled)" in str(waiting_on(job(dep="afterok:5(unfulfilled)"), NOW, {}))
    never = waiting_on(job(dep="afterok:5(failed)"), NOW, {})
    assert never is not None and "can never be satisfied" in never
    # a dependency Slurm has cleared, or none (the listing prints "(null)")
    assert waiting_on(job(dep=""), NOW, {}) is None


def test_a_begin_time_in_the_future_keeps_a_job_that_never_ran_out():
    assert "begin time" in str(waiting_on(job(eligible=int(NOW) + 600), NOW, {}))
    assert waiting_on(job(eligible=int(NOW) - 1), NOW, {}) is None
    # a requeued job's EligibleTime is Slurm's own relaunch delay, which the daemon skips
    assert waiting_on(job(restarts=1, eligible=int(NOW) + 121), NOW, {}) is None


def test_a_limit_slurm_names_for_a_released_job_keeps_it_out_and_then_rechecks():
    limited = job(reason="PartitionTimeLimit", priority=1)
    assert limit_reason(limited) == "PartitionTimeLimit"
    assert limit_reason(job(reason="QOSMaxGRESPerUser", priority=1)) == "QOSMaxGRESPerUser"
    assert limit_reason(replace(limited, priority=0)) is None  # held: the reason is the hold
    assert "PartitionTimeLimit" in str(waiting_on(limited, NOW, {}))
    held_back = HeldBack(recheck_s=300)
    held_back.observe({"7": limited}, NOW)
    held_again = job()  # the act held it again: Slurm now shows the hold, not the limit
    kept_out = held_back.reasons(NOW + 60)
    assert "tried again shortly" in str(waiting_on(held_again, NOW + 60, kept_out))
    held_back.observe({"7": held_again}, NOW + 299)
    assert "7" in held_back.reasons(NOW + 299)
    assert held_back.reasons(NOW + 300) == {}  # time to try it again, observed or not
    held_back.observe({"7": held_again}, NOW + 300)
    assert held_back.reasons(NOW + 300) == {}
    held_back.observe({"7": limited}, NOW)
    held_back.observe({}, NOW + 1)  # gone: forgotten
    assert held_back.reasons(NOW + 1) == {}


def view_of(*jobs: SlurmJob):
    node = SlurmNode("v100-1", "idle", frozenset(), "v100", 4, 0, ("gpu",), "", 1)
    return build_view([node], list(jobs), None, NOW)


def test_the_view_marks_waiting_jobs_and_the_act_never_places_one():
    blocked = job(dep="afterok:5(unfulfilled)")
    fine = job("8")
    running = job("9", state="RUNNING", reason="None", priority=1, dep="afterok:5(unfulfilled)")
    v = view_of(blocked, fine, running)
    by_id = {o.job.id: o for o in v.snapshot.jobs}
    assert by_id["7"].waiting_on and by_id["8"].waiting_on is None
    assert by_id["9"].waiting_on is None  # running: it started, nothing to keep out
    slices = (NodeSlice("v100-1", 1),)
    placement = RoundPlacement(0, NOW, {j: JobPlacement(j, "v100", slices) for j in ("7", "8")})
    plan = plan_act(placement, v, None)
    assert [o.job_id for o in plan.starts] == ["8"]
    assert dict(plan.failed)["7"].startswith(WAITING_ON_CLUSTER)


def test_status_says_why_slurm_would_not_start_it():
    reason = WAITING_ON_CLUSTER + "it waits for its dependency afterok:5(unfulfilled)"
    doc = {"state": "skipped", "skip": "waiting_on_cluster", "reason": reason,
           "allocation": {}, "paired_allocation": {}}  # fmt: skip
    assert why(doc, "max_min_fairness") == "not scheduled: " + reason


def test_a_job_past_its_deadline_is_never_placed_and_is_given_back():
    """Slurm ends a job past its --deadline the moment it could start it: given GPUs,
    they would sit idle for the round (issue seen: 2 GPUs for a round). Held, Slurm
    leaves it pending for ever: it is given back, and Slurm ends it as DEADLINE."""
    late = replace(job("7"), deadline=int(NOW) - 1)
    now_due = replace(job("8"), deadline=int(NOW))
    ahead = replace(job("9"), deadline=int(NOW) + 3600)
    assert "--deadline" in str(waiting_on(late, NOW, {}))
    assert "has passed" in str(waiting_on(now_due, NOW, {}))
    assert waiting_on(ahead, NOW, {}) is None and waiting_on(job("6"), NOW, {}) is None
    v = view_of(late, ahead)
    slices = (NodeSlice("v100-1", 1),)
    placement = RoundPlacement(0, NOW, {j: JobPlacement(j, "v100", slices) for j in ("7", "9")})
    plan = plan_act(placement, v, None)
    assert [o.job_id for o in plan.starts] == ["9"]
    assert refused_held([late, ahead], None, NOW) == {"7": waiting_on(late, NOW, {})}
    # its owner's hold stays the owner's: the Lua lets only the owner release it
    owners = replace(late, comment="gavel:type=A3C,hold=user")
    assert refused_held([owners], None, NOW) == {}
    # a running job past its deadline runs on (Slurm checks it at start only)
    running = replace(late, state="RUNNING", reason="None", priority=1)
    assert refused_held([running], None, NOW) == {}
    assert {o.job.id: o.waiting_on for o in view_of(running).snapshot.jobs} == {"7": None}


def test_a_singleton_is_free_when_no_job_of_its_user_and_name_runs_or_waits_ahead():
    """Slurm's rule, read by the daemon: Slurm re-tests a held job's singleton only in a
    periodic pass (30 s and more after the job ahead ended), so the daemon would leave
    a chain's next link without GPUs for a minute per link."""
    me = replace(job("20", dep=SINGLETON), name="chain", user_id=1000)
    ahead = replace(me, job_id="19", dependency="")
    assert not singleton_free(me, [me, replace(ahead, state="RUNNING")])
    assert not singleton_free(me, [me, replace(ahead, state="SUSPENDED")])
    assert not singleton_free(me, [me, ahead])  # waits, submitted earlier
    assert not singleton_free(me, [me, replace(ahead, job_id="18_3")])  # an array's task
    # ended or ending, behind it, another name, another user: none blocks it
    assert singleton_free(me, [me, replace(ahead, state="COMPLETED")])
    assert singleton_free(me, [me, replace(ahead, state="COMPLETING")])
    assert singleton_free(me, [me, replace(ahead, job_id="21")])
    assert singleton_free(me, [me, replace(ahead, state="RUNNING", name="chain2")])
    assert singleton_free(me, [me, replace(ahead, state="RUNNING", user_id=1001)])
    # a name or owner it cannot tell: not free (Slurm's own pass decides)
    assert not singleton_free(replace(me, name=""), [me])
    assert not singleton_free(replace(me, user_id=None), [me])
    assert waiting_on(me, NOW, {}, singleton_ok=True) is None
    assert "singleton" in str(waiting_on(me, NOW, {}))
    # only a singleton alone: any other unfulfilled dependency still keeps it out
    both = replace(me, dependency="afterok:5(unfulfilled),singleton(unfulfilled)")
    assert "afterok" in str(waiting_on(both, NOW, {}, singleton_ok=True))


def test_the_view_frees_a_singleton_whose_job_ahead_ended():
    me = replace(job("20", dep=SINGLETON), name="chain", user_id=1000)
    ahead = replace(me, job_id="19", dependency="", state="RUNNING", reason="None", priority=1)
    by_id = {o.job.id: o for o in view_of(me, ahead).snapshot.jobs}
    assert by_id["20"].waiting_on is not None
    by_id = {o.job.id: o for o in view_of(me, replace(ahead, state="COMPLETED")).snapshot.jobs}
    assert by_id["20"].waiting_on is None
