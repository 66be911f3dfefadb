"""The progress behind each job's learned cells in the scheduler state's JSON
(core/learned_rows/job_rows_doc.py): kept across a restart, older states still read, and the
figures in it (user reports, in the end) checked on load: hostile values first."""

from __future__ import annotations

import copy
import math

import pytest

from slurm_gavel.core.learned_rows.job_rows import JobRows, LastSeen, Measured, record_measurements
from slurm_gavel.core.learned_rows.job_rows_doc import rows_from_json, rows_to_json
from slurm_gavel.core.learned_rows.row_trust import Progress, TrustBounds
from slurm_gavel.core.scheduler_state import JobAccount, SchedulerState
from slurm_gavel.domain.cluster_model import JobPlacement, JobState, ObservedJob
from slurm_gavel.domain.model import Job

ON_V100 = {"1": JobPlacement("1", "v100", (), None, True)}


def _rows() -> JobRows:
    rows = JobRows()
    rows.measured = {"1": {"v100": Measured(9.0, 720.0, 8.0, 360.0, 1)}}
    rows.scale_factor = {"1": 1}
    rows.progress = {"1": {"v100": Progress(6000.0, 720.0, 2, 12.5)}, "2": {}}
    rows.last_seen = {
        "1": LastSeen("v100", 1, 6000.0, {"v100": 720.0, "k80": 60.0}),
        "3": LastSeen(None, 0, None, {}),  # waiting, no report yet: still its sighting
    }
    return rows


def test_progress_and_last_sightings_survive_the_state_file():
    state = SchedulerState()
    state.plugins.learned_rows = _rows()
    back = SchedulerState.from_json(state.to_json()).plugins.learned_rows
    assert back.progress == {"1": {"v100": Progress(6000.0, 720.0, 2, 12.5)}}
    assert back.last_seen == _rows().last_seen
    assert back.measured == _rows().measured
    assert back.seen == {"1", "3"}  # the sighted job too: forgotten if it ended meanwhile


def test_a_restart_learns_what_an_uninterrupted_scheduler_learns():
    # The next interval after a reload counts from the saved sighting: the cell rests on
    # the whole progress, as without the restart (not on the interval after it alone).
    def round_(rows: JobRows, acct: JobAccount, steps: float, restarts: int = 0) -> None:
        o = ObservedJob(job=Job("1", "", 1), state=JobState.RUNNING, gpu_type="v100",
                        steps_done=steps, measured_throughput=None, restarts=restarts)  # fmt: skip
        record_measurements(rows, [o], ON_V100, {"1": acct}, TrustBounds())

    def run(reload_after: int | None) -> JobRows:
        rows, acct = JobRows(), JobAccount()
        # a restart before the third round: that stretch is taken to have lost 30 s
        for i, (steps, restarts) in enumerate([(0.0, 0), (4000.0, 0), (7000.0, 1), (9000.0, 1)]):
            acct.received_s["v100"] = 360.0 * i
            round_(rows, acct, steps, restarts)
            if i == reload_after:
                state = SchedulerState()
                state.plugins.learned_rows = rows
                rows = SchedulerState.from_json(state.to_json()).plugins.learned_rows
        return rows

    straight = run(None)
    assert straight.progress["1"]["v100"] == Progress(9000.0, 1080.0, 2, 30.0, 30.0)
    for at in (0, 1, 2):
        again = run(at)
        assert again.measured == straight.measured, at
        assert again.progress == straight.progress, at


def test_states_saved_before_the_progress_was_kept_still_load():
    doc = rows_to_json(_rows())
    assert doc is not None
    for job in doc["jobs"].values():
        job.pop("progress", None)
        job.pop("last_seen", None)
    got, dropped = rows_from_json(doc)
    assert dropped == 0
    assert got.progress == {} and got.last_seen == {}
    assert got.measured == _rows().measured
    # and no rows at all leave the key out, as before
    assert "job_rows" not in SchedulerState().to_json()


BAD_NUMBERS = [math.nan, math.inf, -math.inf, -1.0, 1e300, True, "5", None, [1.0]]


@pytest.mark.hostile
@pytest.mark.parametrize("bad", BAD_NUMBERS)
@pytest.mark.parametrize("where", [0, 1, 3])
def test_a_hostile_figure_drops_that_progress_cell_only(bad, where):
    doc = rows_to_json(_rows())
    assert doc is not None
    cell = [6000.0, 720.0, 2, 12.5]
    cell[where] = bad
    doc["jobs"]["1"]["progress"] = {"v100": cell, "k80": [100.0, 60.0, 1, 0.0]}
    got, dropped = rows_from_json(doc)
    assert dropped == 1
    assert got.progress == {"1": {"k80": Progress(100.0, 60.0, 1, 0.0)}}
    assert got.measured == _rows().measured and got.last_seen == _rows().last_seen


def test_the_current_stretchs_share_survives_the_state_file_and_older_cells_load():
    rows = _rows()
    rows.progress["1"]["v100"] = Progress(6000.0, 720.0, 2, 12.5, 12.5)
    doc = rows_to_json(rows)
    assert doc is not None
    assert doc["jobs"]["1"]["progress"]["v100"] == [6000.0, 720.0, 2, 12.5, 12.5]
    got, dropped = rows_from_json(copy.deepcopy(doc))
    assert dropped == 0 and got.progress["1"]["v100"] == Progress(6000.0, 720.0, 2, 12.5, 12.5)
    # a cell of four (no restart began the stretch, or an older state) has no share
    doc["jobs"]["1"]["progress"]["v100"] = [6000.0, 720.0, 2, 12.5]
    got, dropped = rows_from_json(doc)
    assert dropped == 0 and got.progress["1"]["v100"].stretch_lost is None


@pytest.mark.hostile
@pytest.mark.parametrize("bad", [*BAD_NUMBERS, 12.6])  # 12.6: more than all it lost
def test_a_hostile_stretch_share_drops_that_progress_cell(bad):
    doc = rows_to_json(_rows())
    assert doc is not None
    doc["jobs"]["1"]["progress"]["v100"] = [6000.0, 720.0, 2, 12.5, bad]
    got, dropped = rows_from_json(doc)
    assert dropped == 1 and got.progress == {}


@pytest.mark.hostile
@pytest.mark.parametrize("bad", [-1, 10**10, 1.5, True, "2", None, math.nan])
def test_a_stretch_count_that_is_no_count_drops_the_cell(bad):
    doc = rows_to_json(_rows())
    assert doc is not None
    doc["jobs"]["1"]["progress"]["v100"][2] = bad
    got, dropped = rows_from_json(doc)
    assert dropped == 1 and got.progress == {}


@pytest.mark.hostile
@pytest.mark.parametrize("progress", ["garbage", [1, 2], {"v100": "x"}, {"v100": [1.0, 2.0, 3]}, 7])
def test_malformed_progress_is_dropped_and_the_row_kept(progress):
    doc = rows_to_json(_rows())
    assert doc is not None
    doc["jobs"]["1"]["progress"] = progress
    got, dropped = rows_from_json(doc)
    assert dropped == 1
    assert got.progress == {} and got.measured == _rows().measured


@pytest.mark.hostile
@pytest.mark.parametrize(
    "change",
    [
        {"gpu": 5},
        {"gpu": ["v100"]},
        {"restarts": -1},
        {"restarts": 2.5},
        {"restarts": True},
        {"restarts": None},
        {"steps": math.nan},
        {"steps": -3.0},
        {"steps": 1e300},
        {"steps": "many"},
        {"received": {"v100": math.inf}},
        {"received": {"v100": -1.0}},
        {"received": {"v100": "1"}},
        {"received": [1.0]},
        {"received": None},
    ],
)
def test_a_hostile_last_sighting_is_dropped(change):
    doc = rows_to_json(_rows())
    assert doc is not None
    doc["jobs"]["1"]["last_seen"].update(change)
    got, dropped = rows_from_json(doc)
    assert dropped == 1
    assert "1" not in got.last_seen and got.last_seen["3"] == _rows().last_seen["3"]
    # the job's cells and progress stay: its next interval starts a new sighting
    assert got.progress["1"] == _rows().progress["1"]


@pytest.mark.hostile
@pytest.mark.parametrize("sighting", ["garbage", 3, [None, 0, None, {}]])
def test_a_last_sighting_that_is_no_record_is_dropped(sighting):
    doc = rows_to_json(_rows())
    assert doc is not None
    doc["jobs"]["3"]["last_seen"] = sighting
    got, dropped = rows_from_json(doc)
    assert dropped == 1 and "3" not in got.last_seen


def test_the_saved_document_shares_nothing_with_the_live_rows():
    # the daemon's inflight record holds one while the round goes on (daemon/inflight.py)
    rows = _rows()
    rows.anchor = {"1": {"v100": 10.0}}
    doc = rows_to_json(rows)
    before = copy.deepcopy(doc)
    rows.last_seen["1"].received["v100"] = 1e6
    rows.progress["1"]["v100"].add(10.0, 10.0, False)
    rows.anchor["1"]["k80"] = 2.0
    rows.measured["1"]["k80"] = Measured(1.0, 1.0)
    assert doc == before


def test_the_running_counts_go_on_across_a_restart():
    # a simulation's summary reports them: they once restarted from the active jobs' cells
    rows = _rows()
    rows.cells_measured, rows.finished, rows.finished_unmeasured, rows.bounded = 7, 5, 2, 3
    back, dropped = rows_from_json(copy.deepcopy(rows_to_json(rows)))
    assert dropped == 0
    assert (back.cells_measured, back.finished, back.finished_unmeasured, back.bounded) == (
        7, 5, 2, 3,
    )  # fmt: skip
    only_counts = JobRows(finished=4)  # no job left, the counts still kept
    assert rows_from_json(rows_to_json(only_counts))[0].finished == 4


@pytest.mark.hostile
@pytest.mark.parametrize("bad", [-1, 1.5, True, "3", None, 10**12, math.nan])
def test_a_count_that_is_no_count_is_dropped(bad):
    doc = rows_to_json(_rows())
    assert doc is not None
    doc["counts"] = {"finished": bad, "bounded": 2}
    back, dropped = rows_from_json(doc)
    assert (back.finished, back.bounded, dropped) == (0, 2, 1)


def test_a_job_seen_but_never_measured_is_kept_and_forgotten_as_without_a_restart():
    # without trust bounds nothing else is kept of it: it is still counted when it ends
    rows = JobRows()
    o = ObservedJob(job=Job("1", "", 1), state=JobState.PENDING)
    record_measurements(rows, [o], {}, {}, None)
    back = rows_from_json(rows_to_json(rows))[0]
    assert back.seen == {"1"}
    record_measurements(back, [], {}, {}, None)
    assert (back.finished, back.finished_unmeasured) == (1, 1)


def test_a_prior_cell_of_zero_stays_an_anchor_cell():
    rows = _rows()
    rows.anchor = {"1": {"v100": 9.0, "k80": 0.0}}
    assert rows_from_json(rows_to_json(rows))[0].anchor == rows.anchor
