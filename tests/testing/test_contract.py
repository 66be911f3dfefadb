"""The contract's scenarios on the fake Slurm alone (no Slurm needed): each asserts what
it must see; test_contract_on_slurm.py runs them on each real release as well."""

from __future__ import annotations

import pytest
from contract_scenarios import SCENARIOS
from slurm_contract import FakeHarness, differences


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_scenario_on_the_fake(name):
    steps = SCENARIOS[name](FakeHarness())
    assert steps


def test_a_difference_in_any_field_fails_the_contract():
    """What test_contract_on_slurm.py compares: every job and node field, the per-job
    failures and what the backend's round reported."""
    (_, obs), *_ = SCENARIOS["held_on_arrival"](FakeHarness())
    assert differences(obs, obs) == []
    other = {**obs, "jobs": {**obs["jobs"], "typed": {**obs["jobs"]["typed"], "held": False}}}
    assert differences(other, obs) == ["jobs.typed.held: fake False, Slurm True"]
    nodes = {**obs["nodes"], "k80-1": {**obs["nodes"]["k80-1"], "gpus_used": 0}}
    assert differences({**obs, "nodes": nodes}, obs) == ["nodes.k80-1.gpus_used: fake 0, Slurm 1"]
    assert differences({**obs, "round": {"started": ["a"]}}, obs)
    assert differences({**obs, "failed": ["typed"]}, obs)
