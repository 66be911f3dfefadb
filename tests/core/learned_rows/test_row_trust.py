"""What a job's own reports may move its throughput row by (core/learned_rows/row_trust.py), and the
rows' place in the scheduler state's JSON (core/learned_rows/job_rows_doc.py). Reports are user
input: hostile values first."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from slurm_gavel.core.learned_rows.job_rows import JobRows, Measured, record_measurements
from slurm_gavel.core.learned_rows.job_rows_doc import rows_from_json, rows_to_json
from slurm_gavel.core.learned_rows.row_trust import (
    Progress,
    TrustBounds,
    admit,
    loss_estimate,
    progress_range,
    progress_rate,
)
from slurm_gavel.core.scheduler_state import JobAccount, SchedulerState
from slurm_gavel.domain.cluster_model import JobPlacement, JobState, ObservedJob
from slurm_gavel.domain.model import Job

B = TrustBounds(ratio_factor=2.0, step_factor=1.5, max_rate=1e7)
ANCHOR = {"v100": 10.0, "k80": 2.0}  # the prior: 5x faster on v100


@pytest.mark.hostile
@pytest.mark.parametrize(
    "rate", [math.nan, math.inf, -math.inf, -1.0, 0.0, 1e8, 1e308, True, "5", None]
)
def test_no_number_in_range_is_no_measurement(rate):
    assert admit(B, "v100", rate, None, {}, ANCHOR, level_free=True) is None  # type: ignore[arg-type]
    assert admit(B, "v100", rate, 10.0, {}, ANCHOR, level_free=False) is None  # type: ignore[arg-type]


def test_a_measured_cell_moves_a_bounded_step_per_round():
    assert admit(B, "v100", 100.0, 10.0, {}, {}, level_free=True) == 15.0
    assert admit(B, "v100", 1.0, 10.0, {}, {}, level_free=True) == pytest.approx(10 / 1.5)
    assert admit(B, "v100", 12.0, 10.0, {}, {}, level_free=True) == 12.0


def test_a_typed_job_stays_within_the_factor_of_its_prior_ratios_and_level():
    # claims 10x on v100: its k80 prior cell (2.0) holds the ratio to 5x * 2
    assert admit(B, "v100", 100.0, None, {}, ANCHOR, level_free=False) == 20.0
    assert admit(B, "v100", 1.0, None, {}, ANCHOR, level_free=False) == 5.0
    # its measured k80 cell counts instead of the prior's
    assert admit(B, "v100", 100.0, None, {"k80": 4.0}, ANCHOR, level_free=False) == 40.0


def test_a_job_of_no_known_type_sets_its_level_then_its_ratios_are_bounded():
    assert admit(B, "v100", 1000.0, None, {}, ANCHOR, level_free=True) == 1000.0
    # a second type: the ratio to the measured cell within 2x of the prior's 5x
    assert admit(B, "k80", 1000.0, None, {"v100": 1000.0}, ANCHOR, level_free=True) == 400.0
    assert admit(B, "k80", 1.0, None, {"v100": 1000.0}, ANCHOR, level_free=True) == 100.0


def test_bounds_that_contradict_each_other_move_nothing():
    # the step says 10..15 (old 10, step 1.5), the ratio says <= 2*5*... within 0.5..2
    assert admit(B, "v100", 100.0, 10.0, {"k80": 0.1}, ANCHOR, level_free=False) is None


@pytest.mark.parametrize("bad", [0.5, math.nan, math.inf, -2.0])
def test_bounds_themselves_are_checked(bad):
    with pytest.raises(ValueError, match="must be a finite number >= 1"):
        TrustBounds(ratio_factor=bad)


def _running(job: Job, gpu: str, rate: float, steps: float | None = None) -> ObservedJob:
    return ObservedJob(
        job=job, state=JobState.RUNNING, gpu_type=gpu, steps_done=steps, measured_throughput=rate
    )


def _pending(job: Job, steps: float | None = 0.0) -> ObservedJob:
    return ObservedJob(job=job, state=JobState.PENDING, steps_done=steps)


ON_V100 = {"1": JobPlacement("1", "v100", (), None, True)}


def _first_run(rows: JobRows, job: Job, claim: float, steps: float, seconds: float = 360.0):
    """Round 1 sees the job waiting (0 steps), round 2 after `seconds` on a V100 (the
    accounts' figure) with `steps` done, reporting `claim` steps/s."""
    acct = JobAccount()
    record_measurements(rows, [_pending(job)], {}, {"1": acct}, B)
    acct.received_s["v100"] = seconds
    record_measurements(rows, [_running(job, "v100", claim, steps)], ON_V100, {"1": acct}, B)
    return acct


def _untyped(rows: JobRows) -> Job:
    rows.anchor = {"1": dict(ANCHOR)}
    rows.untyped = {"1"}
    return Job("1", "", 1, total_steps=1e9)


def test_reports_move_only_the_jobs_own_row_and_only_where_it_ran():
    rows = JobRows()
    liar, honest = Job("1", "", 1), Job("2", "", 1)
    rows.anchor = {"1": dict(ANCHOR), "2": dict(ANCHOR)}
    rows.untyped = {"1", "2"}
    placement = {j: JobPlacement(j, "v100", (), None, True) for j in ("1", "2")}
    accounts = {"1": JobAccount(), "2": JobAccount()}
    record_measurements(rows, [_pending(liar), _pending(honest)], {}, accounts, B)
    accounts["1"].received_s["v100"] = 360.0
    active = [_running(liar, "v100", 50.0, 360 * 50.0), _running(honest, "v100", 7.0, 2000.0)]
    record_measurements(rows, active, placement, accounts, B)
    # job 2 has no time on v100 in the accounts: its report measures nothing
    assert set(rows.measured) == {"1"}
    assert rows.measured["1"]["v100"] == Measured(50.0, 360.0, run=0)
    # next round it claims 1000x: its progress holds it (50 steps/s through the round)
    accounts["1"].received_s["v100"] = 720.0
    record_measurements(
        rows, [_running(liar, "v100", 50_000.0, 720 * 50.0)], placement, accounts, B
    )
    assert rows.measured["1"]["v100"].steps_per_s == pytest.approx(50.0)
    assert rows.bounded == 1


def test_an_untyped_jobs_first_report_cannot_set_its_level_beyond_its_progress():
    # 3300 steps in its first 360 s on a V100: it claims 100, then 0.1
    rows = JobRows()
    _first_run(rows, _untyped(rows), 100.0, 3300.0)
    assert rows.measured["1"]["v100"].steps_per_s == pytest.approx(3300 / 360)
    rows = JobRows()
    _first_run(rows, _untyped(rows), 0.1, 3300.0)
    assert rows.measured["1"]["v100"].steps_per_s == pytest.approx(3300 / 360)
    assert rows.bounded == 1  # both claims were outside its range: logged


def test_a_claim_inside_the_progress_range_moves_nothing_either():
    # 3300 steps in 360 s, its first run: the range allows [9.17, 10] (30 s of
    # start-up), but the cell is what it did, whatever it claims within the range: a
    # claim at the top would otherwise buy it the allowance's 9 % (every rate lie ended
    # there), and an honest one is not needed to set it
    for claim in (9.17, 9.5, 10.0, None):
        rows = JobRows()
        _first_run(rows, _untyped(rows), claim, 3300.0)  # type: ignore[arg-type]
        assert rows.measured["1"]["v100"].steps_per_s == pytest.approx(3300 / 360, rel=1e-12)
        assert rows.bounded == 0  # none of them is a lie its progress shows


def test_a_typed_jobs_level_is_held_to_its_progress_too():
    rows = JobRows()
    rows.anchor = {"1": dict(ANCHOR)}
    job = Job("1", "ResNet", 1, total_steps=1e9)
    # the table's ratio allows 20 on v100; its progress shows 9.2 (11 at most)
    _first_run(rows, job, 20.0, 3300.0)
    assert rows.measured["1"]["v100"].steps_per_s == pytest.approx(3300 / 360)


@pytest.mark.hostile
@pytest.mark.parametrize("steps", [None, math.nan, math.inf, -5.0, "3300", True])
def test_a_report_with_no_usable_progress_behind_it_measures_nothing(steps):
    rows = JobRows()
    _first_run(rows, _untyped(rows), 100.0, steps)  # type: ignore[arg-type]
    assert rows.measured == {}
    assert rows.bounded == 0  # waiting for progress is no lie: nothing logged


def test_no_report_is_taken_before_the_run_outlasts_its_start_up_allowance():
    rows = JobRows()
    _first_run(rows, _untyped(rows), 100.0, 100.0, seconds=30.0)
    assert rows.measured == {}


@pytest.mark.hostile
def test_a_drip_upwards_never_leaves_the_progress_range():
    rows = JobRows()
    job = _untyped(rows)
    acct = _first_run(rows, job, 10.0, 3300.0)
    claim, seconds, steps = 10.0, 360.0, 3300.0
    for _ in range(20):
        claim *= 1.5  # within the step bound every round
        seconds += 360.0
        steps += 3600.0  # 10 steps/s, the same run
        acct.received_s["v100"] = seconds
        record_measurements(rows, [_running(job, "v100", claim, steps)], ON_V100, {"1": acct}, B)
        assert rows.measured["1"]["v100"].steps_per_s == pytest.approx(steps / seconds)
    assert rows.bounded == 20  # every claim but the first was beyond its progress


def test_each_new_run_may_lose_the_start_up_allowance_once():
    rows = JobRows()
    job = _untyped(rows)
    acct = _first_run(rows, job, 10.0, 3300.0)
    # the same run one round on: one stretch, 30 s allowed
    acct.received_s["v100"] = 720.0
    record_measurements(rows, [_running(job, "v100", 10.0, 6900.0)], ON_V100, {"1": acct}, B)
    assert rows.progress["1"]["v100"] == Progress(6900.0, 720.0, 1)
    # preempted (a round waiting), then a new run (Slurm's restart count 1): a new stretch
    record_measurements(rows, [_pending(job, 6900.0)], {}, {"1": acct}, B)
    acct.received_s["v100"] = 1080.0
    again = replace(_running(job, "v100", 10.0, 10_200.0), restarts=1)
    record_measurements(rows, [again], ON_V100, {"1": acct}, B)
    # the restart is taken to have lost the allowance (nothing says what it cost)
    assert rows.progress["1"]["v100"] == Progress(10_200.0, 1080.0, 2, 30.0, 30.0)
    assert progress_range(B, rows.progress["1"]["v100"]) == pytest.approx(
        (10_200 / 1080, 10_200 / 1020)
    )
    assert progress_rate(B, rows.progress["1"]["v100"]) == pytest.approx(10_200 / 1050)
    # steps that went back (an older checkpoint) show nothing
    acct.received_s["v100"] = 1440.0
    back = replace(_running(job, "v100", 10.0, 5000.0), restarts=1)
    record_measurements(rows, [back], ON_V100, {"1": acct}, B)
    assert rows.progress["1"]["v100"] == Progress(10_200.0, 1080.0, 2, 30.0, 30.0)


def test_a_restart_is_taken_to_cost_what_the_rounds_plan_it_to_cost():
    # the job ran 10 steps/s, its restart lost 12 s (measured: restart_s): the cell is
    # the truth, not the 10.12 the allowance's 30 s would allow
    rows = JobRows()
    job = _untyped(rows)
    acct = _first_run(rows, job, 10.0, 3600.0)
    record_measurements(rows, [_pending(job, 3600.0)], {}, {"1": acct}, B, restart_s={"1": 12.0})
    acct.received_s["v100"] = 720.0
    again = replace(_running(job, "v100", 50.0, 3600.0 + 348 * 10.0), restarts=1)
    record_measurements(rows, [again], ON_V100, {"1": acct}, B, restart_s={"1": 12.0})
    assert rows.progress["1"]["v100"].lost == 12.0
    assert rows.measured["1"]["v100"].steps_per_s == pytest.approx(10.0)


def test_a_restart_cost_measured_after_its_stretch_began_replaces_the_allowance():
    # On Slurm a restart's cost is measured once the restarted run reports, after its
    # first interval counted: until then the stretch is taken to have lost the whole
    # allowance. The rounds after use what was measured, so an honest job's cell comes
    # to its rate (10 steps/s, 2.5 s lost), not 2x it (the allowance, 60 s into a run).
    rows = JobRows()
    job = _untyped(rows)
    acct = _first_run(rows, job, 10.0, 3600.0)
    record_measurements(rows, [_pending(job, 3600.0)], {}, {"1": acct}, B)
    steps = 3600.0
    for i, cost in enumerate([None, 2.5, 2.5]):  # the first interval: nothing measured
        acct.received_s["v100"] = 360.0 + 20.0 * (i + 1)
        steps += 20.0 * 10.0 - (25.0 if i == 0 else 0.0)  # 2.5 s of its first 20 lost
        again = replace(_running(job, "v100", 10.0, steps), restarts=1)
        costs = None if cost is None else {"1": cost}
        record_measurements(rows, [again], ON_V100, {"1": acct}, B, restart_s=costs)
        if i == 0:
            assert rows.progress["1"]["v100"].lost == 30.0
    cell = rows.progress["1"]["v100"]
    assert (cell.lost, cell.stretch_lost, cell.stretches) == (2.5, 2.5, 2)
    # a cost raised again later (the restart clock's next figure) moves the share, once
    again = replace(_running(job, "v100", 10.0, steps + 200.0), restarts=1)
    acct.received_s["v100"] += 20.0
    record_measurements(rows, [again], ON_V100, {"1": acct}, B, restart_s={"1": 4.0})
    assert (rows.progress["1"]["v100"].lost, rows.progress["1"]["v100"].stretch_lost) == (4.0, 4.0)
    # a stretch that began with no restart keeps its nothing, whatever the cost says
    fresh = Progress()
    fresh.add(100.0, 10.0, True, 0.0)
    fresh.add(100.0, 10.0, False, 0.0, loss_now=30.0)
    assert (fresh.lost, fresh.stretch_lost) == (0.0, None)


@pytest.mark.hostile
@pytest.mark.parametrize("bad", [math.nan, math.inf, -1.0, -math.inf])
def test_a_hostile_loss_estimate_leaves_the_stretch_share(bad):
    p = Progress()
    p.add(100.0, 40.0, True, 30.0)
    p.add(100.0, 10.0, False, 0.0, loss_now=bad)
    assert (p.lost, p.stretch_lost) == (30.0, 30.0)


@pytest.mark.hostile
@pytest.mark.parametrize(
    ("cost", "lost"),
    [(None, 30.0), (-5.0, 0.0), (math.nan, 30.0), (math.inf, 30.0), (-math.inf, 0.0),
     (1e300, 30.0), (True, 30.0), ("12", 30.0), (12.0, 12.0), (0.0, 0.0)],
)  # fmt: skip
def test_a_restarts_cost_never_allows_more_than_the_allowance(cost, lost):
    # the daemon's restart clock measures the cost from the job's own reports: a liar
    # inflating it gets the allowance at most
    assert loss_estimate(B, cost) == lost  # type: ignore[arg-type]


def test_time_shared_or_spread_rounds_show_no_progress_of_a_type():
    rows = JobRows()
    job = _untyped(rows)
    acct = JobAccount()
    record_measurements(rows, [_pending(job)], {}, {"1": acct}, B)
    acct.received_s["v100"] = 360.0
    spread = {"1": JobPlacement("1", "v100", (), None, False)}
    record_measurements(rows, [_running(job, "v100", 10.0, 3300.0)], spread, {"1": acct}, B)
    shared = {"1": JobPlacement("1", "v100", (), "2", True)}
    acct.received_s["v100"] = 720.0
    record_measurements(rows, [_running(job, "v100", 10.0, 6600.0)], shared, {"1": acct}, B)
    assert rows.progress.get("1", {}) == {}


@pytest.mark.hostile
@pytest.mark.parametrize(
    ("steps", "seconds"), [(math.nan, 10.0), (10.0, math.inf), (-1.0, 10.0), (5.0, 0.0)]
)
def test_progress_ignores_intervals_that_show_nothing(steps, seconds):
    p = Progress()
    p.add(steps, seconds, True)
    assert p == Progress() and progress_range(B, p) is None


def test_the_progress_range_narrows_the_other_bounds_and_overrules_them_where_they_differ():
    free = {"level_free": True}
    assert admit(B, "v100", 12.0, 10.0, {}, {}, progress=(11.0, 13.0), **free) == 12.0
    assert admit(B, "v100", 14.0, 10.0, {}, {}, progress=(11.0, 13.0), **free) == 13.0
    # the step bound (old 10: 6.7..15) and the progress (40..44) do not meet: what the
    # job did decides, the claim only within it
    assert admit(B, "v100", 100.0, 10.0, {}, {}, progress=(40.0, 44.0), **free) == 44.0
    assert admit(B, "v100", 41.0, 10.0, {}, {}, progress=(40.0, 44.0), **free) == 41.0
    # a typed job whose ratio bound (v100 <= 2 x 5 x k80's 2.0 = 20) its progress
    # exceeds: its steps are not its type's (another unit), its progress decides
    typed = {"level_free": False}
    assert admit(B, "v100", 100.0, None, {}, ANCHOR, progress=(40.0, 44.0), **typed) == 44.0
    # and contradicting bounds without progress still move nothing
    assert admit(B, "v100", 100.0, 10.0, {"k80": 0.1}, ANCHOR, **typed) is None


@pytest.mark.parametrize("bad", [-1.0, math.nan, math.inf, True])
def test_the_start_up_allowance_is_checked(bad):
    with pytest.raises(ValueError, match="start_allowance_s"):
        TrustBounds(start_allowance_s=bad)


def test_without_bounds_measurements_are_taken_as_they_come():
    rows = JobRows()
    placement = {"1": JobPlacement("1", "v100", (), None, True)}
    record_measurements(rows, [_running(Job("1", "", 1), "v100", 50.0)], placement, {})
    assert rows.measured["1"]["v100"].steps_per_s == 50.0


def test_rows_survive_the_state_file_and_hostile_figures_do_not():
    rows = JobRows()
    rows.measured = {"1": {"v100": Measured(12.5, 300.0)}, "2": {"k80": Measured(1.0, 0.0)}}
    rows.scale_factor = {"1": 1, "2": 2}
    rows.anchor = {"1": dict(ANCHOR)}
    rows.untyped = {"1"}
    state = SchedulerState()
    state.plugins.learned_rows = rows
    back = SchedulerState.from_json(state.to_json()).plugins.learned_rows
    assert back.measured == rows.measured and back.scale_factor == rows.scale_factor
    assert back.anchor == rows.anchor and back.untyped == {"1"}
    assert back.seen == {"1", "2"}  # forgotten at the first round if they ended meanwhile
    # no rows: no key (older states and their readers unchanged)
    assert "plugins" not in SchedulerState().to_json()
    doc = rows_to_json(rows)
    assert doc is not None
    doc["jobs"]["1"]["measured"]["v100"] = [float("nan"), 1.0]
    doc["jobs"]["1"]["measured"]["p100"] = [1e300, 1.0]
    doc["jobs"]["1"]["measured"]["k80"] = [-3.0, 1.0]
    doc["jobs"]["1"]["anchor"]["v100"] = float("inf")
    doc["jobs"]["2"]["scale_factor"] = True
    doc["jobs"]["3"] = "garbage"
    got, dropped = rows_from_json(doc)
    assert got.measured == {} and got.anchor == {"1": {"k80": 2.0}}
    assert dropped == 6
    assert rows_from_json({"format": 99})[0].measured == {}


def test_a_job_that_reports_its_steps_but_no_rate_is_measured_from_them():
    # keeping its rate back must not keep it on its prior (a job slower than its prior
    # would gain by it): what its steps show, 3300 in 360 s of a first run
    for rate in (None, math.nan, -1.0, "fast", True):
        rows = JobRows()
        _first_run(rows, _untyped(rows), rate, 3300.0)  # type: ignore[arg-type]
        got = rows.measured["1"]["v100"].steps_per_s
        assert got == pytest.approx(3300 / 360)
        assert rows.bounded == 0  # no report was clamped: nothing to log
    rows = JobRows()
    _first_run(rows, _untyped(rows), 1e300, 3300.0)  # beyond the rate cap: a lie, logged
    assert rows.measured["1"]["v100"].steps_per_s == pytest.approx(3300 / 360)
    assert rows.bounded == 1


@pytest.mark.hostile
def test_the_daemons_own_estimate_of_steps_is_no_progress():
    # a job that reports nothing has its steps estimated from the table (the daemon's
    # estimate_steps): that is the table's speed, not evidence of the job's
    rows = JobRows()
    job = _untyped(rows)
    acct = JobAccount()
    guess = replace(_pending(job), steps_estimated=True)
    record_measurements(rows, [guess], {}, {"1": acct}, B)
    acct.received_s["v100"] = 360.0
    o = replace(_running(job, "v100", 100.0, 3300.0), steps_estimated=True)
    record_measurements(rows, [o], ON_V100, {"1": acct}, B)
    assert rows.measured == {} and rows.progress.get("1", {}) == {}


# The round reads a plain float's steps done and rate with an inlined test
# (record_measurements is its hottest loop); every other value goes through usable_steps
# and usable_rate. Hostile figures must land exactly where those two put them.
HOSTILE_FIGURES = [math.nan, math.inf, -math.inf, -1.0, -0.0, 0.0, 5e-324, 1e308, 120.0,
                   True, False, 7, -3, "5", None, 2**80]  # fmt: skip


@pytest.mark.hostile
@pytest.mark.parametrize("steps", HOSTILE_FIGURES)
def test_reported_steps_are_taken_exactly_as_usable_steps_takes_them(steps):
    from slurm_gavel.core.learned_rows.job_rows import usable_steps

    job = Job(id="1", job_type="ResNet-18 (batch size 64)", total_steps=1e6)
    rows, acct = JobRows(), JobAccount({"v100": 360.0})
    record_measurements(rows, [_running(job, "v100", 1.0, steps)], ON_V100, {"1": acct}, B)  # type: ignore[arg-type]
    taken, expected = rows.last_seen["1"].steps, usable_steps(steps)
    assert type(taken) is type(expected)
    assert taken == expected or (taken is None and expected is None)


@pytest.mark.hostile
@pytest.mark.parametrize("rate", HOSTILE_FIGURES)
def test_reported_rates_are_taken_exactly_as_usable_rate_takes_them(rate):
    """A lie is counted only for a usable rate outside the progress range; without trust
    bounds a usable rate is the cell."""
    from slurm_gavel.core.learned_rows.job_rows import usable_rate

    job = Job(id="1", job_type="ResNet-18 (batch size 64)", total_steps=1e6)
    rows = JobRows()
    acct = _first_run(rows, job, 10.0, 3600.0)  # 10 steps/s honestly
    acct.received_s["v100"] += 360.0
    record_measurements(rows, [_running(job, "v100", rate, 7200.0)], ON_V100, {"1": acct}, B)  # type: ignore[arg-type]
    usable = usable_rate(rate)
    lie = usable is not None and not (9.0 <= usable <= 11.0)
    assert ("1" in rows.clamped) is lie
    if lie:
        assert rows.clamped["1"][1] == usable
    unbounded = JobRows()
    record_measurements(unbounded, [_running(job, "v100", rate, 7200.0)], ON_V100, {"1": acct})  # type: ignore[arg-type]
    cell = unbounded.measured.get("1", {}).get("v100")
    assert (None if cell is None else cell.steps_per_s) == usable


def test_progress_rate_is_rate_within_its_range():
    from slurm_gavel.core.learned_rows.row_trust import rate_within

    for p in (Progress(3600.0, 360.0, 1), Progress(500.0, 400.0, 2, 45.0), Progress(1.0, 31.0, 1)):
        shown = progress_range(B, p)
        assert shown is not None
        assert progress_rate(B, p) == rate_within(B, p, shown)


def test_written_out_inits_make_the_same_frozen_values():
    """Measured and LastSeen are built per job per round with a written-out __init__:
    the same fields, equality, hash and immutability as the generated one."""
    from dataclasses import FrozenInstanceError, astuple, fields

    from slurm_gavel.core.learned_rows.job_rows import LastSeen

    m = Measured(2.0, 30.0, 1.5, 10.0, 3)
    assert astuple(m) == (2.0, 30.0, 1.5, 10.0, 3)
    assert Measured(2.0, 30.0) == Measured(steps_per_s=2.0, seconds=30.0, run=-1)
    assert [f.name for f in fields(m)] == list(vars(m))
    assert hash(m) == hash(Measured(2.0, 30.0, 1.5, 10.0, 3))
    seen = LastSeen("v100", 1, None, {"v100": 5.0})
    assert [f.name for f in fields(seen)] == list(vars(seen))
    assert replace(seen, steps=4.0).steps == 4.0
    for obj, name in ((m, "steps_per_s"), (seen, "gpu")):
        with pytest.raises(FrozenInstanceError):
            setattr(obj, name, 0)
