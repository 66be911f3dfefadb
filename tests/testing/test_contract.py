"""The contract's scenarios on the fake Slurm alone (no Slurm needed): each asserts what
it must see; test_contract_on_slurm.py runs them on each real release as well."""

from __future__ import annotations

import pytest
from contract_scenarios import SCENARIOS
from slurm_contract import FakeHarness


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_scenario_on_the_fake(name):
    steps = SCENARIOS[name](FakeHarness())
    assert steps
