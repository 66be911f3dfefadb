"""What a job's own reports may move its throughput row by (core/row_trust.py), and the
rows' place in the scheduler state's JSON (core/job_rows_doc.py). Reports are user
input: hostile values first."""

from __future__ import annotations

import math

import pytest

from slurm_gavel.core.cluster_model import JobPlacement, JobState, ObservedJob
from slurm_gavel.core.job_rows import JobRows, Measured, record_measurements
from slurm_gavel.core.job_rows_doc import rows_from_json, rows_to_json
from slurm_gavel.core.model import Job
from slurm_gavel.core.row_trust import TrustBounds, admit
from slurm_gavel.core.scheduler_state import JobAccount, SchedulerState

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


def _running(job: Job, gpu: str, rate: float) -> ObservedJob:
    return ObservedJob(job=job, state=JobState.RUNNING, gpu_type=gpu, measured_throughput=rate)


def test_reports_move_only_the_jobs_own_row_and_only_where_it_ran():
    rows = JobRows()
    liar, honest = Job("1", "", 1), Job("2", "", 1)
    rows.anchor = {"1": dict(ANCHOR), "2": dict(ANCHOR)}
    rows.untyped = {"1", "2"}
    placement = {j: JobPlacement(j, "v100", (), None, True) for j in ("1", "2")}
    accounts = {"1": JobAccount(received_s={"v100": 60.0}), "2": JobAccount()}
    active = [_running(liar, "v100", 50.0), _running(honest, "v100", 7.0)]
    record_measurements(rows, active, placement, accounts, B)
    # job 2 has no time on v100 in the accounts: its report measures nothing
    assert set(rows.measured) == {"1"}
    assert rows.measured["1"]["v100"] == Measured(50.0, 60.0, run=0)
    # next round it claims 1000x: one step of 1.5x
    active = [_running(liar, "v100", 50_000.0)]
    record_measurements(rows, active, placement, accounts, B)
    assert rows.measured["1"]["v100"].steps_per_s == 75.0
    assert rows.bounded == 1


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
    state.job_rows = rows
    back = SchedulerState.from_json(state.to_json()).job_rows
    assert back.measured == rows.measured and back.scale_factor == rows.scale_factor
    assert back.anchor == rows.anchor and back.untyped == {"1"}
    assert back.seen == {"1", "2"}  # forgotten at the first round if they ended meanwhile
    # no rows: no key (older states and their readers unchanged)
    assert "job_rows" not in SchedulerState().to_json()
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
