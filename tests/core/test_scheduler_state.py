"""SchedulerState: its JSON form, bad documents, and the caches that are never persisted."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from slurm_gavel.backends.cluster_spec import parse_cluster_spec
from slurm_gavel.backends.simulated import SimulatedCluster
from slurm_gavel.core.round_config import SchedulerConfig
from slurm_gavel.core.scheduler import run_round
from slurm_gavel.core.scheduler_state import SchedulerState, copy_state
from slurm_gavel.domain.model import Job
from slurm_gavel.domain.throughputs import load_table
from slurm_gavel.errors import InputError

TABLE = load_table()
RESNET = "ResNet-50 (batch size 64)"


@pytest.mark.parametrize(
    "doc, needle",
    [
        ({"format": "nope"}, "not a scheduler state"),
        ({"format": "slurm-gavel-scheduler-state/1"}, "malformed"),
    ],
)
def test_bad_state_is_an_input_error(doc, needle):
    with pytest.raises(InputError, match=needle):
        SchedulerState.from_json(doc)


def test_the_round_memo_is_never_written_and_a_copy_starts_without_it():
    jobs = [Job("a", RESNET, 1, total_steps=1e9), Job("b", RESNET, 2, total_steps=1e9)]
    sim = SimulatedCluster(parse_cluster_spec("v100:1x4", TABLE), jobs, TABLE)
    state, _ = run_round(SchedulerState(), sim, SchedulerConfig(table=TABLE))
    assert state.caches.memo is not None
    assert "memo" not in state.to_json()
    assert copy_state(state).caches.memo is None


def test_every_top_level_field_is_state_in_the_json_and_derived_work_is_in_caches():
    # What a reloaded daemon would decide differently without is state, and in the
    # JSON; what only saves work is in the caches, which a copy starts without.
    jobs = [Job("a", RESNET, 1, total_steps=1e9), Job("b", RESNET, 2, total_steps=1e9)]
    sim = SimulatedCluster(parse_cluster_spec("v100:1x4", TABLE), jobs, TABLE)
    state, _ = run_round(SchedulerState(), sim, SchedulerConfig(table=TABLE))
    written = set(state.to_json()) | {"plugins"}  # (plugins: written when not empty)
    kept = {f.name for f in dataclasses.fields(SchedulerState)} - {"caches"}
    assert kept <= written, kept - written
    assert state.caches.cluster_rows is not None
    fresh = copy_state(state).caches
    assert (fresh.memo, fresh.cluster_rows) == (None, None)


def test_each_jobs_records_in_the_json_are_copies_the_next_round_leaves_alone():
    """The daemon keeps each job's JSON text while its record is equal to the last
    (daemon/state_encode.py): a record holding a live dict would change with the next
    round and still compare equal to itself. Accounts and allocation rows are copies."""
    jobs = [Job("a", RESNET, 1, total_steps=1e9), Job("b", RESNET, 2, total_steps=1e9)]
    sim = SimulatedCluster(parse_cluster_spec("v100:1x4", TABLE), jobs, TABLE)
    state, _ = run_round(SchedulerState(), sim, SchedulerConfig(table=TABLE))
    sim.advance(60.0)
    out = state.to_json()
    records = json.dumps([out["jobs"], out["allocation"]["fractions"], out["allocation_rows"]])
    state, _ = run_round(state, sim, SchedulerConfig(table=TABLE))  # mutates the state
    assert state.to_json()["jobs"]["a"]["received_s"] != out["jobs"]["a"]["received_s"]
    assert state.allocation is not None
    state.allocation.fractions["a"]["v100"] = 0.123
    assert json.dumps([out["jobs"], out["allocation"]["fractions"], out["allocation_rows"]]) == (
        records
    )


# A state file as main wrote it before the learned rows had their plugin slot: the
# rows at the top level as "job_rows" (tests/core/data, written by that code).
BEFORE_SLOTS = Path(__file__).parent / "data" / "state_before_plugin_slots.json"


def test_a_state_file_of_before_the_slots_loads_its_learned_rows_into_the_slot():
    doc = json.loads(BEFORE_SLOTS.read_text())
    saved = doc["job_rows"]["jobs"]
    state = SchedulerState.from_json(doc)
    rows = state.plugins.learned_rows
    assert set(rows.measured) == set(saved) and rows.measured
    for j, entry in saved.items():
        got = {t: [m.steps_per_s, m.seconds, m.earlier_rate, m.earlier_seconds, m.run]
               for t, m in rows.measured[j].items()}  # fmt: skip
        assert got == entry["measured"]
        assert rows.anchor[j] == entry["anchor"]
    # written back: in the slot, once
    out = state.to_json()
    assert "job_rows" not in out
    slot = dict(out["plugins"]["learned_rows"])
    # with the running counts, which such a file lacks: its cells so far
    assert slot.pop("counts") == {"cells_measured": sum(len(e["measured"]) for e in saved.values())}
    assert slot == doc["job_rows"]
    assert SchedulerState.from_json(json.loads(json.dumps(out))).to_json() == out


@pytest.mark.parametrize(
    "hostile",
    [
        "garbage",
        17,
        [1, 2],
        {"format": 99, "jobs": {}},
        {"format": 1, "jobs": {"a": {"measured": {"v100": [float("nan"), 1.0]}}}},
        {"format": 1, "jobs": {"a": {"measured": {"v100": [5.0, -1.0]}, "scale_factor": 1}}},
        {"format": 1, "jobs": {"a": {"measured": {"v100": "ab"}, "scale_factor": 1}}},
        {"format": 1, "jobs": {"a": {"measured": {"v100": [5.0, 1.0]}, "scale_factor": 1e9}}},
        {"format": 1, "jobs": {"a": {"measured": 3}}},
    ],
)
@pytest.mark.parametrize("where", ["slot", "before the slots"])
def test_hostile_learned_rows_are_dropped_never_believed(hostile, where):
    doc = json.loads(BEFORE_SLOTS.read_text())
    del doc["job_rows"]
    if where == "slot":
        doc["plugins"] = {"learned_rows": hostile}
    else:
        doc["job_rows"] = hostile
    rows = SchedulerState.from_json(doc).plugins.learned_rows
    assert rows.measured == {}
    assert "plugins" not in SchedulerState.from_json(doc).to_json()


def test_the_slot_wins_over_rows_left_at_the_top_level():
    doc = json.loads(BEFORE_SLOTS.read_text())
    doc["plugins"] = {"learned_rows": {"format": 1, "jobs": {}}}
    assert SchedulerState.from_json(doc).plugins.learned_rows.measured == {}


def test_the_moldable_memory_s_derived_parts_are_never_written():
    # (its measurements are: tests/core/moldable/test_mold_memory_doc.py)
    state = SchedulerState.from_json(json.loads(BEFORE_SLOTS.read_text()))
    job = Job("m", RESNET, 2, total_steps=1e9)
    state.plugins.moldable_counts.jobs["m"] = (job, 2, job)
    assert "moldable_counts" not in json.dumps(state.to_json())
    assert copy_state(state).plugins.moldable_counts.jobs == {}
