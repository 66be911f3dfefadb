"""core/restart_costs/restart_costs.py: the measured restart costs' own slot in the scheduler state,
its JSON, a state file of before the slot, and hostile figures."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from slurm_gavel.core.restart_costs import restart_costs
from slurm_gavel.core.scheduler_state import SchedulerState, copy_state

# written by the code of before the slot (the restart clock set restart_cost_s in each
# job's account): jobs 0 and 1 measured, job 2 not
IN_ACCOUNTS = Path(__file__).parents[1] / "data" / "state_restart_cost_in_accounts.json"


def test_a_state_file_of_before_the_slot_loads_each_measured_cost_into_the_slot():
    doc = json.loads(IN_ACCOUNTS.read_text())
    assert doc["jobs"]["0"]["restart_cost_s"] == 42.5 and "plugins" not in doc
    state = SchedulerState.from_json(doc)
    assert state.plugins.restart_costs == {"0": 42.5, "1": 7.0}
    # written back in the slot, once, and no longer in the accounts
    out = state.to_json()
    assert out["plugins"]["restart_costs"] == {"0": 42.5, "1": 7.0}
    assert all("restart_cost_s" not in a for a in out["jobs"].values())
    assert copy_state(state).plugins.restart_costs == {"0": 42.5, "1": 7.0}
    # the rest of the file reads as it did
    assert set(out["jobs"]) == set(doc["jobs"])
    for j, a in out["jobs"].items():
        assert a == {k: v for k, v in doc["jobs"][j].items() if k != "restart_cost_s"}


def test_the_slot_wins_over_costs_left_in_the_accounts():
    doc = json.loads(IN_ACCOUNTS.read_text())
    doc["plugins"] = {"restart_costs": {"1": 3.0}}
    assert SchedulerState.from_json(doc).plugins.restart_costs == {"1": 3.0}


HOSTILE = [math.nan, math.inf, -math.inf, -1.0, True, "12", None, [1.0], {"a": 1}]


@pytest.mark.hostile
@pytest.mark.parametrize("bad", HOSTILE)
@pytest.mark.parametrize("where", ["slot", "account"])  # today's slot, an older file's
def test_hostile_costs_are_dropped_never_believed(bad, where):
    # the state file is hostile input: a cost that is not a finite number of seconds
    # >= 0 is dropped (the job's restarts cost the default until measured again), and
    # the rest of the state loads
    doc = json.loads(IN_ACCOUNTS.read_text())
    if where == "slot":
        doc["plugins"] = {"restart_costs": {"0": bad, "1": 7.0}}
    else:
        doc["jobs"]["0"]["restart_cost_s"] = bad
    state = SchedulerState.from_json(json.loads(json.dumps(doc)))
    assert state.plugins.restart_costs == {"1": 7.0}
    assert set(state.jobs) == {"0", "1", "2"}


@pytest.mark.hostile
@pytest.mark.parametrize("slot", ["garbage", 17, [1, 2], None, {"0": {"x": 1}}])
def test_a_slot_that_is_not_a_mapping_of_seconds_is_empty(slot):
    assert restart_costs.from_json(slot) == {}


def test_fold_is_the_mean_of_the_last_two_and_forgets_the_jobs_that_ended():
    slot: dict[str, float] = {}
    accounts = {"a": object(), "b": object()}
    restart_costs.fold(slot, [("a", 300.0)], accounts)
    assert slot == {"a": 300.0}
    for k in range(1, 4):
        restart_costs.fold(slot, [("a", 120.0)], accounts)
        assert slot["a"] == pytest.approx(120.0 + 180.0 / 2**k)
    restart_costs.fold(slot, [("c", 5.0)], accounts)  # no account: not kept
    assert set(slot) == {"a"}
    restart_costs.fold(slot, [], {"b": object()})
    assert slot == {}
