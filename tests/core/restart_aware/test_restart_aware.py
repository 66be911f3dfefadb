"""Restart-aware rounds (core/restart_aware/restart_aware.py): runs kept for their restart cost over
the budget, Gavel's schedule unchanged when restarts are free, no starvation of a
blocked multi-GPU job, no makespan cliff over restart costs, protection only where the
allocation gives the job time, jobs that never ran first among equal priorities, and a
run about to finish kept to its end (within a bound, whatever its job declares)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from plugin_configs import overhead, restart_aware

from slurm_gavel.backends.cluster_spec import parse_cluster_spec
from slurm_gavel.backends.simulated import SimulatedCluster
from slurm_gavel.core.mechanism import INF
from slurm_gavel.core.restart_aware.restart_aware import (
    FINISH_LEASES,
    about_to_finish,
    backed,
    new_runs_first,
    protect_new_runs,
    protected_runs,
    protection_seconds,
    restart_cost,
)
from slurm_gavel.core.restart_aware.run_protection import RunProtection
from slurm_gavel.core.round_config import SchedulerConfig
from slurm_gavel.core.scheduler import run_round
from slurm_gavel.core.scheduler_state import JobAccount, SchedulerState, copy_state
from slurm_gavel.domain.cluster_model import (
    JobPlacement,
    JobState,
    Node,
    NodeSlice,
    ObservedJob,
)
from slurm_gavel.domain.model import Allocation, Job
from slurm_gavel.domain.throughputs import load_table
from slurm_gavel.simulate.engine import SimulationOptions, simulate
from slurm_gavel.simulate.generate import generate_trace

TABLE = load_table()
RESNET = "ResNet-50 (batch size 64)"
SPEC = "v100:3x4,p100:3x4,k80:3x4"


def _config(cost: float, aware: bool, **over) -> SchedulerConfig:
    return SchedulerConfig(
        table=TABLE, settings=overhead(cost), plugins=restart_aware(aware), **over
    )


def _run(jobs, spec, cost, aware, budget=0.1, policy="max_min_fairness"):
    opts = SimulationOptions(
        settings=overhead(cost), plugins=restart_aware(aware, budget), record_wall_time=False
    )
    return simulate(jobs, parse_cluster_spec(spec, TABLE), TABLE, policy, opts).summary


def test_the_cost_is_measured_else_the_job_s_own_else_its_type_s_else_the_setting():
    cfg = _config(30.0, True, restart_seconds_by_job_type={RESNET: 50.0})
    job = Job("a", RESNET, 1, total_steps=1.0)
    assert restart_cost(job, {}, cfg) == 50.0
    assert restart_cost(replace(job, job_type="A3C"), {}, cfg) == 30.0
    assert restart_cost(replace(job, restart_overhead=70.0), {}, cfg) == 70.0
    # the measured costs: the state's own slot, by job
    assert restart_cost(replace(job, restart_overhead=70.0), {"a": 9.0}, cfg) == 9.0
    assert restart_cost(replace(job, restart_overhead=70.0), {"b": 9.0}, cfg) == 70.0
    assert protection_seconds(30.0, 0.1) == pytest.approx(300.0)
    assert protection_seconds(0.0, 0.1) == 0.0


def test_two_jobs_on_one_gpu_swap_once_per_protection_not_every_round():
    # Gavel swaps a and b every other round (test_engine: A, B, B, A, A); with a 100 s
    # restart and a budget of 0.1 each run is kept 1,000 s: a runs rounds 0-2 (1,080 s)
    # (long jobs: neither is ever within FINISH_LEASES protections of its end here)
    rate = TABLE.throughput(RESNET, 1, "v100")
    jobs = [Job(j, RESNET, 1, total_steps=rate * 30000.0) for j in ("a", "b")]
    gavel = _run(jobs, "v100:1x1", 100.0, aware=False)
    aware = _run(jobs, "v100:1x1", 100.0, aware=True)
    assert aware["preemptions"] < gavel["preemptions"]
    assert aware["restart_gpu_hours"] < gavel["restart_gpu_hours"]
    # each resume costs 100 s of GPU: the summary's lost GPU time is restarts x 100 s
    assert aware["restart_gpu_hours"] == pytest.approx(aware["preemptions"] * 100 / 3600, abs=1e-4)
    assert gavel["restart_gpu_hours"] == pytest.approx(gavel["preemptions"] * 100 / 3600, abs=1e-4)
    # round by round: a holds the GPU for the 3 rounds its protection covers
    backend = SimulatedCluster(parse_cluster_spec("v100:1x1", TABLE), jobs, TABLE,
                               preemption_overhead_seconds=100.0)  # fmt: skip
    config = _config(100.0, True)
    state = SchedulerState()
    runs = []
    for _ in range(6):
        state, report = run_round(state, backend, config)
        runs.append(sorted(report.placement.jobs))
        backend.advance(backend.clock + 360.0)
    assert runs[:3] == [["a"], ["a"], ["a"]]
    assert runs[3] == ["b"]
    assert _until(state, "b") == pytest.approx(1080.0 + 1000.0)
    # the protection survives the daemon's state file
    assert _until(copy_state(state), "b") == _until(state, "b")


def test_free_restarts_leave_gavel_s_schedule_unchanged():
    jobs = generate_trace(80, 600.0, TABLE, seed=3, multi_gpu=True)
    a = _run(jobs, SPEC, 0.0, aware=False)
    b = _run(jobs, SPEC, 0.0, aware=True)
    assert json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def test_a_blocked_multi_gpu_job_is_not_starved_by_backfilled_small_ones():
    # 4 GPUs taken by single-GPU runs protected until 3,000, 3,900, 4,800 and 5,700 s
    # (started 900 s apart); 20 more single-GPU jobs and a 4-GPU job that outranks them
    # (weight 8) arrive. The big job never finds 4 free GPUs if each GPU freed is
    # taken and protected again by a smaller job (without the backfill rule it has not
    # started after 400 rounds); with it, the jobs placed behind it start unprotected
    # runs, so it starts once the protections it found have run out.
    rate1 = TABLE.throughput(RESNET, 1, "v100")
    rate4 = TABLE.throughput(RESNET, 4, "v100")
    small = [
        Job(f"s{i:02d}", RESNET, 1, total_steps=rate1 * 30000.0,
            arrival_time=float(900 * i if i < 4 else 2900))
        for i in range(24)
    ]  # fmt: skip
    big = Job("big", RESNET, 4, total_steps=rate4 * 600.0, arrival_time=3000.0,
              priority_weight=8.0)  # fmt: skip
    jobs = sorted([*small, big], key=lambda j: (j.arrival_time, j.id))
    gavel = _first_start(jobs, "big", aware=False)
    aware = _first_start(jobs, "big", aware=True)
    assert gavel == 3240.0
    assert aware <= 5700.0 + 360.0 + 360.0


def _first_start(jobs, job_id, aware):
    backend = SimulatedCluster(parse_cluster_spec("v100:1x4", TABLE), jobs, TABLE,
                               preemption_overhead_seconds=300.0)  # fmt: skip
    config = _config(300.0, aware)
    state = SchedulerState()
    for _ in range(400):
        state, report = run_round(state, backend, config)
        if job_id in report.placement.jobs:
            return report.time
        backend.advance(backend.clock + 360.0)
        backend.completions.clear()
    raise AssertionError(f"{job_id} never started")


@pytest.mark.parametrize("cost", [120.0, 360.0, 720.0])
def test_no_makespan_cliff_over_restart_costs(cost):
    # The fixed stay credit doubled the makespan of a Philly window at one value (360)
    # and not at its neighbours. Protection grows with the cost, smoothly: the
    # makespan stays within 10 % of Gavel's with the same restart cost.
    jobs = generate_trace(80, 300.0, TABLE, seed=7, multi_gpu=True)
    gavel = _run(jobs, SPEC, cost, aware=False)
    aware = _run(jobs, SPEC, cost, aware=True)
    assert aware["unfinished_jobs"] == 0
    assert aware["makespan_s"] <= 1.10 * gavel["makespan_s"]
    assert aware["preemptions"] <= gavel["preemptions"]


def _on(job_id, gpu_type, node):
    return JobPlacement(job_id, gpu_type, (NodeSlice(node, 1),), None, True)


def test_backed_means_a_positive_fraction_on_the_type():
    alloc = Allocation("max_min_fairness", {"a": {"v100": 0.4, "k80": 0.0}})
    assert backed(alloc, "a", "v100")
    assert not backed(alloc, "a", "k80")
    assert not backed(alloc, "a", "p100")
    assert not backed(alloc, "b", "v100")  # a job the allocation does not know
    assert backed(None, "a", "k80")  # no allocation: nothing to go by


def test_a_run_the_allocation_gives_no_time_on_its_type_is_not_protected():
    # a was placed on k80 as a work-conserving fill (its allocation: v100 only), b on
    # v100 where its allocation wants it: only b's run is protected (300 s / 0.1).
    config = _config(300.0, True)
    jobs = {j: Job(j, RESNET, 1, total_steps=1e6) for j in ("a", "b")}
    state = SchedulerState()
    state.allocation = Allocation("max_min_fairness", {"a": {"v100": 0.5}, "b": {"v100": 0.5}})
    state.jobs = {"a": JobAccount(), "b": JobAccount()}
    state.placement = {"a": _on("a", "k80", "k80-000"), "b": _on("b", "v100", "v100-000")}
    protect_new_runs(state, config, {}, jobs, set(), 1000.0)
    assert _until(state, "a") is None
    assert _until(state, "b") == pytest.approx(1000.0 + 3000.0)


def test_a_protected_run_loses_protection_when_its_type_s_fraction_drops_to_0():
    # Both runs are protected until 5,000 s; a reallocation gives a no time on v100
    # any more: a's run is no longer kept, b's still is.
    config = _config(300.0, True)
    state = SchedulerState()
    state.jobs = {j: JobAccount() for j in ("a", "b")}
    state.plugins.restart_aware = {j: RunProtection(protected_until=5000.0) for j in ("a", "b")}
    state.placement = {"a": _on("a", "v100", "v100-000"), "b": _on("b", "v100", "v100-001")}
    considered = [
        (
            ObservedJob(Job(j, RESNET, 1, total_steps=1e6), JobState.RUNNING, "v100",
                        state.placement[j].nodes),
            {"v100": 1.0},
        )
        for j in ("a", "b")
    ]  # fmt: skip
    nodes = [Node(f"v100-00{i}", "v100", 1) for i in range(2)]
    state.allocation = Allocation("m", {"a": {"v100": 0.5}, "b": {"v100": 0.5}})
    assert set(protected_runs(state, considered, nodes, 1000.0, config)) == {"a", "b"}
    state.allocation = Allocation("m", {"a": {"k80": 1.0}, "b": {"v100": 0.5}})
    assert set(protected_runs(state, considered, nodes, 1000.0, config)) == {"b"}


def test_new_runs_first_breaks_equal_priorities_right_after_the_priority():
    # sort keys as mechanism._ranked makes them: (-priority, -deficit, -fraction,
    # -runs_here, key, type, members)
    ran = (-INF, 0.0, -0.5, 0, "a", "v100", ("a",))  # ran before, waits now
    new = (-INF, 0.0, -0.5, 0, "b", "v100", ("b",))  # never ran
    here = (-INF, 0.0, -0.5, -1, "c", "v100", ("c",))  # the incumbent, ran before
    bigger = (-INF, 0.0, -0.6, 0, "d", "v100", ("d",))  # a larger fraction, ran before
    higher = (-3.0, 0.0, -0.5, 0, "e", "v100", ("e",))  # a lower priority, ran before
    top = (-INF, 0.0, -0.5, 0, "f", "v100", ("f",))  # never ran either
    waits = {"a": True, "b": False, "c": True, "d": True, "e": True, "f": False}
    gavel = sorted([ran, new, here, bigger, higher, top])
    assert gavel == [bigger, here, ran, new, top, higher]
    # the jobs that never ran first (in Gavel's order among them), then the rest in
    # Gavel's order; a lower priority stays behind whatever it would pay
    assert new_runs_first(gavel, waits) == [new, top, bigger, here, ran, higher]
    # nobody waits for a restart (never ran, or restarts free): Gavel's order unchanged
    assert new_runs_first(gavel, dict.fromkeys(waits, False)) == gavel


def test_a_new_run_is_protected_for_the_longer_of_c_over_b_and_the_attained_service():
    # 300 s restarts, budget 0.1: c/b = 3,000 s. A job that has received 5,000 s (on
    # two types) gets a 5,000 s lease, one that has received 1,000 s the 3,000 s one.
    config = _config(300.0, True)
    jobs = {j: Job(j, RESNET, 1, total_steps=1e9) for j in ("old", "young")}
    state = SchedulerState()
    state.allocation = Allocation("m", {"old": {"v100": 0.5}, "young": {"v100": 0.5}})
    state.jobs = {
        "old": JobAccount(received_s={"v100": 2000.0, "k80": 3000.0}),
        "young": JobAccount(received_s={"v100": 1000.0}),
    }
    state.placement = {
        "old": _on("old", "v100", "v100-000"),
        "young": _on("young", "v100", "v100-001"),
    }
    protect_new_runs(state, config, {}, jobs, set(), 100.0)
    assert _until(state, "old") == pytest.approx(100.0 + 5000.0)
    assert _until(state, "young") == pytest.approx(100.0 + 3000.0)
    # free restarts: no protection however long the job has run
    free = _config(0.0, True)
    protect_new_runs(state, free, {}, jobs, set(), 100.0)
    assert _until(state, "old") is None


def _placed_each_round(jobs: list[Job], until: float) -> dict[float, list[str]]:
    """The jobs placed by each restart-aware round (one GPU, 300 s restarts, rounds
    360 s apart) from time 0 until `until`: round time -> sorted job ids."""
    backend = SimulatedCluster(parse_cluster_spec("v100:1x1", TABLE), jobs, TABLE,
                               preemption_overhead_seconds=300.0)  # fmt: skip
    config = _config(300.0, True)
    state = SchedulerState()
    runs = {}
    while backend.clock < until:
        state, report = run_round(state, backend, config)
        runs[report.time] = sorted(report.placement.jobs)
        done = backend.next_completion_time()  # a round ends early when its jobs finish
        backend.advance(backend.clock + 360.0 if done is None else min(backend.clock + 360.0, done))
    return runs


def test_a_job_that_never_ran_goes_before_a_preempted_one_on_a_freed_gpu():
    # One GPU, 300 s restarts (runs kept 3,000 s). p runs from 0; q (never ran) takes
    # over at 3,240 s and finishes at 6,240 s; r arrives at 6,000 s. At 6,240 s p (ran,
    # preempted) and r (never ran) tie on everything but the job id, which in Gavel's
    # order gives the GPU to p; restart-aware rounds give it to r, whose start costs
    # no restart, and p waits.
    rate = TABLE.throughput(RESNET, 1, "v100")
    jobs = [
        Job("p", RESNET, 1, total_steps=rate * 50000.0),
        Job("q", RESNET, 1, total_steps=rate * 3000.0),
        Job("r", RESNET, 1, total_steps=rate * 50000.0, arrival_time=6000.0),
    ]
    runs = _placed_each_round(jobs, until=7000.0)
    assert runs[0.0] == ["p"] and runs[3240.0] == ["q"] and runs[6120.0] == ["q"]
    assert runs[6240.0] == ["r"]


def test_about_to_finish_counts_the_remaining_steps_in_protections():
    # 300 s restarts, budget 0.1: a protection is 3,000 s; FINISH_LEASES of them 12,000 s
    config = _config(300.0, True)
    more = FINISH_LEASES * 3000.0
    job = Job("a", RESNET, 1, total_steps=10.0 * (1000.0 + more))
    acct = JobAccount(steps_done=10.0 * 1000.0)
    until = 1000.0
    # 10 steps/s: exactly `more` seconds left -> kept; a bit slower -> not
    assert about_to_finish(job, acct, until, 10.0, 1000.0, config)
    assert not about_to_finish(job, acct, until, 9.9, 1000.0, config)
    # no declared total, no rate: never
    assert not about_to_finish(replace(job, total_steps=0.0), acct, until, 10.0, 1000.0, config)
    assert not about_to_finish(job, acct, until, 0.0, 1000.0, config)
    # never unprotected runs (backfill, fills): there is no protection to extend
    assert not about_to_finish(job, JobAccount(steps_done=1e9), None, 10.0, 1000.0, config)
    # free restarts: no protection, no extension
    free = _config(0.0, True)
    assert not about_to_finish(job, acct, until, 10.0, 1000.0, free)
    # ... unless the job's restarts were measured to cost
    assert about_to_finish(job, acct, until, 10.0, 1000.0, free, {"a": 300.0})


@pytest.mark.parametrize("declared", [1.0, 0.5, 1e-300])
def test_a_job_that_under_declares_its_steps_is_kept_at_most_finish_leases_more(declared):
    # Hostile: the user's total_steps is tiny (the daemon caps reported progress at it,
    # so steps done >= total and the job always looks "about to finish"). Its run is
    # kept for FINISH_LEASES more protections after its own, then released like any.
    config = _config(300.0, True)
    state = SchedulerState()
    state.jobs = {"a": JobAccount(steps_done=declared)}
    state.plugins.restart_aware = {"a": RunProtection(protected_until=1000.0)}
    state.placement = {"a": _on("a", "v100", "v100-000")}
    state.allocation = Allocation("m", {"a": {"v100": 1.0}})
    job = Job("a", RESNET, 1, total_steps=declared)
    considered = [
        (ObservedJob(job, JobState.RUNNING, "v100", state.placement["a"].nodes), {"v100": 5.0})
    ]
    nodes = [Node("v100-000", "v100", 1)]
    end = 1000.0 + FINISH_LEASES * 3000.0
    assert set(protected_runs(state, considered, nodes, end - 1.0, config)) == {"a"}
    assert protected_runs(state, considered, nodes, end, config) == {}
    assert protected_runs(state, considered, nodes, end + 3600.0, config) == {}


def test_a_run_about_to_finish_is_not_preempted_when_its_protection_ends():
    # One GPU, 300 s restarts: a's run is protected until 3,000 s and a finishes at
    # 4,000 s; b waits from 0. Gavel's priorities give the GPU to b at 3,240 s (a has
    # had all the time, b none), which would preempt a 760 s before its end and make it
    # pay a restart. Restart-aware rounds keep a until it finishes, then start b.
    rate = TABLE.throughput(RESNET, 1, "v100")
    jobs = [
        Job("a", RESNET, 1, total_steps=rate * 4000.0),
        Job("b", RESNET, 1, total_steps=rate * 20000.0),
    ]
    runs = _placed_each_round(jobs, until=4500.0)
    times = sorted(runs)
    first_b = next(t for t in times if runs[t] == ["b"])
    # a ran in every round until it finished (at 4,000 s: no preemption, no restart)
    assert all(runs[t] == ["a"] for t in times if t < first_b)
    assert first_b == pytest.approx(4000.0) and runs[3240.0] == ["a"]


def test_a_run_just_consolidated_gets_c_over_b_not_its_attained_service():
    # An 8-GPU job that ran 40,000 s spread over three 4-GPU nodes is consolidated onto
    # two: its new run is protected c/b (3,000 s), not 40,000 s; a move between two
    # consolidated placements keeps the longer lease.
    config = _config(300.0, True)
    lm = "LM (batch size 80)"
    jobs = {j: Job(j, lm, 8, total_steps=1e12) for j in ("big", "moved")}
    state = SchedulerState()
    state.allocation = Allocation("m", {"big": {"v100": 1.0}, "moved": {"v100": 1.0}})
    state.jobs = {j: JobAccount(received_s={"v100": 40000.0}) for j in jobs}
    spread = JobPlacement(
        "big",
        "v100",
        (NodeSlice("v100-000", 4), NodeSlice("v100-001", 2), NodeSlice("v100-002", 2)),
        consolidated=False,
    )
    whole = (NodeSlice("v100-003", 4), NodeSlice("v100-004", 4))
    elsewhere = (NodeSlice("v100-005", 4), NodeSlice("v100-006", 4))
    previous = {"big": spread, "moved": JobPlacement("moved", "v100", elsewhere)}
    state.placement = {
        "big": JobPlacement("big", "v100", whole),
        "moved": JobPlacement(
            "moved", "v100", (NodeSlice("v100-000", 4), NodeSlice("v100-001", 4))
        ),
    }
    protect_new_runs(state, config, previous, jobs, set(), 100.0)
    assert _until(state, "big") == pytest.approx(100.0 + 3000.0)
    assert _until(state, "moved") == pytest.approx(100.0 + 40000.0)


def _until(state: SchedulerState, job_id: str) -> float | None:
    """The job's protection in restart-aware rounds' slot; None when it has none."""
    guard = state.plugins.restart_aware.get(job_id)
    return None if guard is None else guard.protected_until
