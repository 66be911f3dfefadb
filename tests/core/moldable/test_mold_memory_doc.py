"""The moldable memory's measurements in the scheduler state's JSON
(core/moldable/mold_memory_doc.py): kept across a restart so that the counts chosen
after it are those chosen without it, and checked on load (the rates came from users'
reports): hostile values first."""

from __future__ import annotations

import json
import math

import pytest

from slurm_gavel.core.cluster_rows import rows_for
from slurm_gavel.core.learned_rows.job_rows import Measured
from slurm_gavel.core.moldable.mold_memory_doc import from_json, to_json
from slurm_gavel.core.moldable.mold_round import MoldMemory, mold_jobs
from slurm_gavel.core.scheduler_state import SchedulerState, copy_state
from slurm_gavel.domain.cluster_model import JobState, NodeSlice, ObservedJob
from slurm_gavel.domain.model import Job
from slurm_gavel.domain.throughputs import load_table

TABLE = load_table()
R18 = "ResNet-18 (batch size 16)"


def _memory() -> MoldMemory:
    memory = MoldMemory()
    memory.measured = {"m": {4: {"v100": 12.5, "k80": 3.25}, 1: {"v100": 7.0}}}
    memory.stashed = {"m": {2: {"v100": Measured(9.0, 720.0, 8.0, 360.0, 1)}}}
    job = Job("m", R18, 1, scale_range=(1, 4))
    memory.jobs = {"m": (job, 4, job)}  # derived: not written
    return memory


def test_the_measurements_and_stashed_cells_survive_the_state_file():
    state = SchedulerState()
    state.plugins.moldable_counts = _memory()
    back = copy_state(state).plugins.moldable_counts
    assert back.measured == _memory().measured
    assert back.stashed == _memory().stashed
    assert back.jobs == {} and back.values == {}  # rebuilt by the next round
    assert to_json(back) == to_json(_memory())


def test_an_empty_memory_writes_nothing():
    assert to_json(MoldMemory()) is None
    assert "plugins" not in SchedulerState().to_json()


def test_a_restart_chooses_the_count_the_measurement_chose():
    # measured far slower at 4 GPUs than the table says: the next start is smaller,
    # after a restart too (it once started at 4 again, the rate forgotten)
    job = Job("m", R18, 1, total_steps=1e9, scale_range=(1, 4))
    capacity = {"v100": 4}
    rows = rows_for(None, TABLE, capacity)
    running = ObservedJob(job, JobState.RUNNING, gpu_type="v100", nodes=(NodeSlice("n0", 4),),
                          measured_throughput=TABLE.throughput(R18, 1, "v100") * 0.5)  # fmt: skip
    state = SchedulerState()
    mold_jobs(state.plugins.moldable_counts, [running], rows, capacity)
    held = [ObservedJob(job, JobState.HELD)]
    kept = mold_jobs(state.plugins.moldable_counts, held, rows, capacity)[0].job.scale_factor
    reloaded = copy_state(state).plugins.moldable_counts
    assert kept == 2
    assert mold_jobs(reloaded, held, rows, capacity)[0].job.scale_factor == kept


def test_a_memory_holding_only_measurements_is_forgotten_with_its_jobs():
    # as a restarted one (nothing derived in it) is: forgetting must not depend on caches
    rows = rows_for(None, TABLE, {"v100": 4})
    rigid = [ObservedJob(Job("r", R18, 1), JobState.PENDING)]
    memory = from_json(to_json(_memory()))
    assert memory.holds_jobs() and not memory.jobs
    mold_jobs(memory, rigid, rows, {"v100": 4})
    assert not memory.holds_jobs()


@pytest.mark.hostile
@pytest.mark.parametrize(
    "measured",
    [
        {"4": {"v100": math.nan}},
        {"4": {"v100": math.inf}},
        {"4": {"v100": -1.0}},
        {"4": {"v100": 0.0}},
        {"4": {"v100": True}},
        {"4": {"v100": "12"}},
        {"4": {"v100": 1e300}},
        {"0": {"v100": 1.0}},
        {"-1": {"v100": 1.0}},
        {"04": {"v100": 1.0}},
        {"4.0": {"v100": 1.0}},
        {" 4": {"v100": 1.0}},
        {"\u0664": {"v100": 1.0}},  # an Arabic-Indic four: a decimal, not ASCII
        {"99999": {"v100": 1.0}},
        {"1" * 5000: {"v100": 1.0}},
        {"4": [1.0]},
        {"4": "v100"},
        [4, {"v100": 1.0}],
        "garbage",
    ],
)
def test_hostile_measurements_are_dropped_never_believed(measured):
    doc = {"format": 1, "jobs": {"m": {"measured": measured}}}
    memory = from_json(json.loads(json.dumps(doc)))
    assert memory.measured == {}
    assert to_json(memory) is None


@pytest.mark.hostile
@pytest.mark.parametrize(
    "cell",
    [
        [math.nan, 1.0],
        [5.0, -1.0],
        [5.0, 1.0, 9.0, 2.0, 0],  # its earlier runs' seconds beyond its own
        [5.0, 1.0, 1.0, 0.5, True],
        [5.0],
        "ab",
        {"rate": 5.0},
    ],
)
def test_hostile_stashed_cells_are_dropped_never_believed(cell):
    doc = {"format": 1, "jobs": {"m": {"stashed": {"2": {"v100": cell}}}}}
    assert from_json(json.loads(json.dumps(doc))).stashed == {}


@pytest.mark.hostile
@pytest.mark.parametrize(
    "doc",
    [
        None,
        "x",
        3,
        [],
        {"format": 2, "jobs": {}},
        {"format": 1, "jobs": []},
        {"format": 1, "jobs": {"m": 5}},
    ],
)
def test_a_malformed_slot_loads_as_no_memory(doc):
    memory = from_json(doc)
    assert not memory.holds_jobs()


def test_one_bad_cell_drops_that_cell_only():
    doc = {"format": 1, "jobs": {"m": {"measured": {"4": {"v100": 3.0, "k80": -2}, "x": {}}}}}
    assert from_json(doc).measured == {"m": {4: {"v100": 3.0}}}
