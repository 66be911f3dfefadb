"""Restart-aware rounds' slot in the scheduler state
(core/restart_aware/run_protection.py): its JSON form, a state file of before the
slots, and hostile values in either."""

from __future__ import annotations

import json
import math

import pytest

from slurm_gavel.core.restart_aware.run_protection import RunProtection, from_json, to_json
from slurm_gavel.core.scheduler_state import JobAccount, SchedulerState, copy_state


def test_the_slot_round_trips_through_the_state_file():
    state = SchedulerState()
    state.jobs = {"a": JobAccount(), "b": JobAccount(), "c": JobAccount()}
    state.plugins.restart_aware = {
        "a": RunProtection(run_started=0.0, protected_until=3000.0),
        "b": RunProtection(run_started=5.0),
        "c": RunProtection(),  # nothing to keep: not written
    }
    doc = state.to_json()
    assert doc["plugins"] == {
        "restart_aware": {"a": {"run_started": 0.0, "protected_until": 3000.0},
                          "b": {"run_started": 5.0}},
    }  # fmt: skip
    assert "protected_until" not in json.dumps(doc["jobs"])  # one home: the slot
    again = copy_state(state).plugins.restart_aware
    assert again == {"a": state.plugins.restart_aware["a"], "b": state.plugins.restart_aware["b"]}
    # no protection anywhere: no "plugins" key at all (an unchanged file for everyone else)
    assert "plugins" not in SchedulerState().to_json()


def test_a_state_file_of_before_the_slots_keeps_its_protections():
    state = SchedulerState()
    state.jobs = {"a": JobAccount()}
    doc = state.to_json()
    doc["jobs"]["a"].update(protected_until=3000.0, run_started=10.0)
    loaded = SchedulerState.from_json(json.loads(json.dumps(doc)))
    assert loaded.plugins.restart_aware == {"a": RunProtection(10.0, 3000.0)}
    # and the next save writes them in the slot
    assert loaded.to_json()["plugins"]["restart_aware"]["a"]["protected_until"] == 3000.0


@pytest.mark.hostile
@pytest.mark.parametrize(
    "value", [math.nan, math.inf, -math.inf, True, "3000", [1], {"x": 1}, 1e400]
)
def test_a_hostile_entry_is_dropped_never_believed(value):
    assert from_json({"a": {"protected_until": value}, "b": {"run_started": 1.0}}) == {
        "b": RunProtection(run_started=1.0)
    }
    assert from_json({"a": value}) == {}
    assert from_json(value) == {}
    assert to_json({"a": RunProtection()}) == {}
