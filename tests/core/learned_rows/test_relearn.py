"""When a changed row re-solves, and when a re-solve keeps the accounting
(core/learned_rows/relearn.py), and the round that uses both (core/scheduler.py):
learning without churn."""

from __future__ import annotations

from dataclasses import replace

import pytest
from round_series import run_rounds

from slurm_gavel.backends.cluster_spec import parse_cluster_spec
from slurm_gavel.backends.simulated import SimulatedCluster, noisy
from slurm_gavel.core.learned_rows import relearn
from slurm_gavel.core.learned_rows.job_rows import Knowledge, row_source
from slurm_gavel.core.learned_rows.learned_rows_settings import LearnedRowsSettings
from slurm_gavel.core.learned_rows.row_trust import TrustBounds
from slurm_gavel.core.plugin_settings import DAEMON_PLUGINS
from slurm_gavel.core.round_config import SchedulerConfig
from slurm_gavel.core.round_jobs import job_set_key
from slurm_gavel.core.round_settings import DAEMON_DEFAULTS
from slurm_gavel.core.scheduler import reallocate_if_due
from slurm_gavel.core.scheduler_state import JobAccount, SchedulerState, copy_state
from slurm_gavel.domain.cluster_model import JobState, ObservedJob
from slurm_gavel.domain.model import Allocation, Job, PairShare
from slurm_gavel.domain.throughputs import load_table

TABLE = load_table()
RESNET = "ResNet-50 (batch size 64)"
A3C = "A3C"


def _alloc(**fractions: dict[str, float]) -> Allocation:
    return Allocation("max_min_fairness", {j: dict(r) for j, r in fractions.items()})


ROW = {"v100": 10.0, "k80": 2.0}


def test_a_row_within_noise_never_re_solves():
    alloc = _alloc(a={"v100": 1.0})
    now = [("a", {"v100": 10.0 * (1 + relearn.MISJUDGED), "k80": 2.0}, 1e9, 0.0, 30.0)]
    assert not relearn.rows_misjudged(alloc, {"a": ROW}, now)


def test_a_misjudged_long_job_re_solves_and_a_nearly_done_one_does_not():
    alloc = _alloc(a={"v100": 1.0})
    half = {"v100": 5.0, "k80": 2.0}  # the allocation thought 10 steps/s: 50 % off
    # 1,000 steps left at 5 steps/s: 200 s, half of it misjudged = 100 s at stake
    assert relearn.rows_misjudged(alloc, {"a": ROW}, [("a", half, 1000.0, 0.0, 30.0)])
    # the same 100 s at stake against a restart of 60 s: not worth 2 x 60 s
    assert not relearn.rows_misjudged(alloc, {"a": ROW}, [("a", half, 1000.0, 0.0, 60.0)])
    # 10 steps left: 1 s at stake
    assert not relearn.rows_misjudged(alloc, {"a": ROW}, [("a", half, 10.0, 0.0, 1.0)])


def test_a_job_of_unknown_length_is_expected_to_run_as_long_as_it_has():
    """Most jobs on Slurm declare no total steps: their time at stake is the time they
    have run (a job of unknown length used to count as finished, and never re-solved:
    the daemon then kept two jobs on the wrong types for good)."""
    alloc = _alloc(a={"v100": 1.0})
    half = {"v100": 5.0, "k80": 2.0}
    assert relearn.rows_misjudged(alloc, {"a": ROW}, [("a", half, None, 30.0, 5.0)])
    assert not relearn.rows_misjudged(alloc, {"a": ROW}, [("a", half, None, 10.0, 5.0)])


@pytest.mark.hostile
@pytest.mark.parametrize("unit", [10.0, 0.1, 1e6])
def test_a_policy_that_cannot_see_a_rows_level_is_not_misjudged_by_it(unit):
    # the max-min family divides a job by its own row: a row `unit` times on every
    # type (a job counting its steps in another unit, its word) changes nothing it
    # allocates, so it re-solves nothing there; a change of the ratios still does
    alloc = _alloc(a={"v100": 1.0})
    scaled = {t: v * unit for t, v in ROW.items()}
    now = [("a", scaled, 1e9, 0.0, 0.0)]
    assert relearn.rows_misjudged(alloc, {"a": ROW}, now)  # a policy that plans with it
    assert not relearn.rows_misjudged(alloc, {"a": ROW}, now, level_free=True)
    half = [("a", {"v100": 5.0 * unit, "k80": 2.0 * unit}, 1e9, 0.0, 0.0)]
    assert relearn.rows_misjudged(alloc, {"a": ROW}, half, level_free=True)
    assert "max_min_fairness" in relearn.LEVEL_FREE_POLICIES
    assert "min_total_duration" not in relearn.LEVEL_FREE_POLICIES
    assert "finish_time_fairness" not in relearn.LEVEL_FREE_POLICIES


def test_a_change_on_a_type_the_allocation_does_not_use_is_no_misjudgment():
    alloc = _alloc(a={"v100": 1.0})
    assert not relearn.rows_misjudged(
        alloc, {"a": ROW}, [("a", {"v100": 10.0, "k80": 20.0}, 1e9, 0.0, 0.0)]
    )


@pytest.mark.parametrize("bad", [0.0, -1.0, float("nan")])
def test_unusable_rates_are_no_misjudgment(bad):
    alloc = _alloc(a={"v100": 1.0})
    assert not relearn.rows_misjudged(alloc, {"a": ROW}, [("a", {"v100": bad}, 1e9, 0.0, 0.0)])


def test_jobs_new_to_the_allocation_or_without_fractions_are_left_to_the_job_set_key():
    alloc = _alloc(a={})
    now = [("a", {"v100": 1.0}, 1e9, 0.0, 0.0), ("b", {"v100": 1.0}, 1e9, 0.0, 0.0)]
    assert not relearn.rows_misjudged(alloc, {"a": ROW}, now)


def test_the_accounting_is_kept_for_the_same_jobs_without_pairs():
    old = _alloc(a={"v100": 0.5, "k80": 0.5}, b={"v100": 0.5})
    far = _alloc(a={"v100": 0.9, "k80": 0.1}, b={"k80": 0.5})
    other_jobs = _alloc(a={"v100": 0.5, "k80": 0.5})
    paired = _alloc(a={"v100": 0.5, "k80": 0.5}, b={"v100": 0.5})
    paired.pairs.append(PairShare(("a", "b"), {"v100": 0.1}))
    assert relearn.keeps_accounting(old, old)
    assert relearn.keeps_accounting(old, far)
    assert not relearn.keeps_accounting(old, other_jobs)
    assert not relearn.keeps_accounting(old, paired)
    assert not relearn.keeps_accounting(None, old)


# ---- the round ------------------------------------------------------------------------


def _cluster(jobs, noise=0.0, true_rows=None, spec="v100:1x2,k80:1x2"):
    return SimulatedCluster(
        parse_cluster_spec(spec, TABLE),
        jobs,
        TABLE,
        preemption_overhead_seconds=30.0,
        true_rows=true_rows,
        measurement_noise=noise,
    )


def _config(policy="fifo", **over):
    settings = replace(DAEMON_DEFAULTS, round_seconds=60.0)
    return SchedulerConfig(table=TABLE, policy=policy, settings=settings, **over)


def test_first_reports_that_confirm_the_prior_move_no_job_under_fifo():
    """The demo's case: all jobs present from the first round, every report equal to the
    prior within 0.1 %; the daemon once re-solved at every job's first report and
    stopped most running jobs to start others."""
    jobs = [Job(str(i), RESNET if i % 2 else A3C, 1, total_steps=1e7) for i in range(6)]
    prior = {j.id: TABLE.row(j.job_type, 1) for j in jobs}
    truth = {j: {t: v * 1.001 for t, v in row.items()} for j, row in prior.items()}
    rows = LearnedRowsSettings(bounds=TrustBounds())  # the daemon's
    config = _config(
        knowledge=Knowledge.LEARNED, plugins=replace(DAEMON_PLUGINS, learned_rows=rows)
    )
    _, reports = run_rounds(_cluster(jobs, true_rows=truth), config, 8)
    assert reports[0].reallocated
    assert not any(r.reallocated for r in reports[1:])
    assert sum(len(r.result.preempted) + len(r.result.moved) for r in reports) == 0


def test_a_row_far_off_its_prior_reaches_the_allocation_without_an_arrival():
    """A long job's measurement that halves its rate where it runs re-solves (its
    learned row must reach the allocation of long jobs, with no arrival to wait for)."""
    jobs = [Job("a", RESNET, 1, total_steps=1e7), Job("b", RESNET, 1, total_steps=1e7)]
    prior = TABLE.row(RESNET, 1)
    truth = {"a": {"v100": prior["v100"] / 4, "k80": prior["k80"]}}
    config = _config(knowledge=Knowledge.LEARNED, policy="max_min_fairness")
    _, reports = run_rounds(_cluster(jobs, true_rows=truth), config, 6)
    assert reports[0].reallocated
    assert any(r.reallocated for r in reports[1:])


def test_a_periodic_re_solve_that_repeats_the_allocation_changes_no_placement():
    """Time sharing (8 jobs on 4 GPUs): the mechanism moves jobs every round by design;
    a periodic re-solve of the same inputs must not add to it (it once reset the
    accounting, which reshuffled the priorities)."""
    jobs = [Job(str(i), RESNET if i % 2 else A3C, 1, total_steps=1e7) for i in range(8)]
    base = replace(DAEMON_DEFAULTS, round_seconds=60.0)
    placements = []
    for every in (None, 120.0):
        settings = replace(base, reallocate_every_seconds=every)
        config = SchedulerConfig(table=TABLE, policy="max_min_fairness", settings=settings)
        _, reports = run_rounds(_cluster(jobs), config, 12)
        placements.append(
            [sorted((j, p.gpu_type) for j, p in r.placement.jobs.items()) for r in reports]
        )
        if every is not None:
            assert sum(r.reallocated for r in reports) > 3  # the period did re-solve
    assert placements[0] == placements[1]


def test_a_restarted_daemon_decides_as_the_one_that_kept_running():
    jobs = [Job(str(i), RESNET, 1, total_steps=5e5) for i in range(5)]
    prior = TABLE.row(RESNET, 1)
    truth = {j.id: {t: v * (0.5 + 0.3 * k) for t, v in prior.items()} for k, j in enumerate(jobs)}
    config = _config(knowledge=Knowledge.LEARNED, policy="max_min_fairness")
    sim_a, sim_b = _cluster(jobs, true_rows=truth), _cluster(jobs, true_rows=truth)
    state_a, _ = run_rounds(sim_a, config, 4)
    state_b, _ = run_rounds(sim_b, config, 4)
    state_b = copy_state(state_b)  # through JSON: the restart
    _, rest_a = run_rounds(sim_a, config, 6, state_a)
    _, rest_b = run_rounds(sim_b, config, 6, state_b)
    assert [r.reallocated for r in rest_a] == [r.reallocated for r in rest_b]
    assert [r.placement.jobs.keys() for r in rest_a] == [r.placement.jobs.keys() for r in rest_b]


def test_a_changed_row_is_judged_in_every_round_it_differs_not_once():
    """Whether a round re-solves for a changed row is a function of the state and the
    round's rows: judged in every round in which the row differs from the allocation's
    (a job of unknown length whose time at stake grows re-solves once it pays), never
    only in the round the row changed (a restarted daemon, which cannot know which
    rounds judged before, would decide otherwise)."""
    job = Job("a", RESNET, 1)  # no total steps: its stake is the time it has run
    settings = replace(DAEMON_DEFAULTS, preemption_overhead_seconds=5.0)
    config = SchedulerConfig(table=TABLE, policy="max_min_fairness", settings=settings)
    capacity = {"v100": 1, "k80": 1}
    observed = ObservedJob(job, JobState.RUNNING, "v100")
    considered = [(observed, {"v100": 5.0, "k80": 2.0})]  # v100 half what was planned
    key = job_set_key([observed], capacity)
    state = SchedulerState(
        allocation=_alloc(a={"v100": 1.0}),
        allocation_key=key,
        allocation_time=0.0,
        allocation_rows={"a": ROW},
        jobs={"a": JobAccount(received_s={"v100": 10.0})},
    )
    # ~29 % misjudged (at the row's level): 10 s run is ~3 s at stake, not worth 2 x 5 s
    assert reallocate_if_due(state, config, considered, key, capacity, 360.0) is None
    state.jobs["a"].received_s["v100"] = 100.0  # ~29 s at stake now: worth it
    reloaded = copy_state(state)
    assert reallocate_if_due(state, config, considered, key, capacity, 720.0) is not None
    assert reallocate_if_due(reloaded, config, considered, key, capacity, 720.0) is not None
    assert state.allocation_rows == reloaded.allocation_rows == {"a": considered[0][1]}


def test_learned_rows_see_the_jobs_reports_and_progress_never_the_true_rows():
    """Learned rows are built from what the jobs report and the progress they make:
    a GPU type a job never ran on keeps its prior's figure, though the true row (the
    oracle's) is 1.3x it, and a measured cell is near the truth only by measurement."""
    jobs = [Job(str(i), RESNET, 1, total_steps=1e7) for i in range(4)]
    prior = TABLE.row(RESNET, 1)
    truth = {j.id: {t: v * 1.3 for t, v in prior.items()} for j in jobs}
    sim = _cluster(jobs, noise=0.1, true_rows=truth)
    config = _config(knowledge=Knowledge.LEARNED, policy="max_min_fairness")
    assert not config.given_rows
    state, _ = run_rounds(sim, config, 6)
    learned = state.plugins.learned_rows
    source = row_source(
        config.knowledge, state.caches.cluster_rows, learned, {}, config.plugins.learned_rows.bounds
    )
    assert source is not None and learned.measured
    for o in sim.observe().jobs:
        row = source.row(o)
        ran = state.jobs[o.job.id].received_s
        for gpu in prior:
            if ran.get(gpu, 0.0) == 0.0:
                assert row[gpu] == prior[gpu], (o.job.id, gpu)
            elif gpu in state.plugins.learned_rows.measured.get(o.job.id, {}):
                assert row[gpu] == pytest.approx(truth[o.job.id][gpu], rel=0.25)


def test_noise_is_deterministic_per_run_and_centred():
    a = noisy(10.0, 0.1, 0, "j", 0, "v100")
    assert a == noisy(10.0, 0.1, 0, "j", 0, "v100")
    assert a != noisy(10.0, 0.1, 0, "j", 1, "v100")
    assert noisy(10.0, 0.0, 0, "j", 0, "v100") == 10.0
    draws = [noisy(1.0, 0.1, s, "j", 0, "v100") for s in range(2000)]
    mean_log = sum(map(__import__("math").log, draws)) / len(draws)
    assert abs(mean_log) < 0.01


@pytest.mark.parametrize("bad", [-0.1, float("nan"), float("inf")])
def test_the_measurement_model_refuses_bad_settings(bad):
    with pytest.raises(ValueError, match="must be >= 0"):
        _cluster([], noise=bad)


def test_a_restarted_runs_start_up_is_taken_at_the_cost_the_rounds_plan():
    """The start-up a restarted run's progress is taken to have lost (job_rows): the
    job's measured restart cost, else its own or its type's, else the configured
    overhead; the daemon configures none (it measures), so a job it has not measured
    yet is allowed the trust bounds' start_allowance_s."""
    from slurm_gavel.core.learned_rows.learned_rows_plugin import restart_losses
    from slurm_gavel.core.round_settings import SIMULATOR_DEFAULTS
    from slurm_gavel.core.round_stages import RoundContext
    from slurm_gavel.core.scheduler_state import JobAccount, SchedulerState
    from slurm_gavel.domain.cluster_model import JobState, ObservedJob

    jobs = [Job("a", RESNET, 1), Job("b", RESNET, 1), Job("c", RESNET, 1, restart_overhead=7.0)]
    active = [ObservedJob(j, JobState.RUNNING) for j in jobs]
    state = SchedulerState()
    state.jobs["a"] = JobAccount()
    state.plugins.restart_costs["a"] = 12.5
    daemon = _config(knowledge=Knowledge.LEARNED)
    sim = replace(daemon, settings=SIMULATOR_DEFAULTS)

    def losses(config: SchedulerConfig) -> dict[str, float]:
        return restart_losses(RoundContext(state, config, None, 0.0, active, {}))  # type: ignore[arg-type]

    assert daemon.settings.preemption_overhead_seconds == 0.0
    assert losses(daemon) == {"a": 12.5, "c": 7.0}
    assert losses(sim) == {"a": 12.5, "b": 30.0, "c": 7.0}
