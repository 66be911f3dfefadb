"""The fake Slurm kept honest: every contract scenario (contract_scenarios.py) runs on the
real local cluster of each release (through the CLI transport) and on the fake, and
each step must observe the same jobs, nodes and per-job failures on both. A difference
is a behaviour of Slurm the fake gets wrong (fix the fake), or one that changed in a
release (model it, or drop it from the projection with the reason)."""

from __future__ import annotations

import pytest
from contract_scenarios import SCENARIOS
from slurm_contract import FakeHarness, RealHarness, differences

pytestmark = pytest.mark.slurm


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_the_fake_observes_what_slurm_does(slurm, name):
    real = SCENARIOS[name](RealHarness(slurm))
    fake = SCENARIOS[name](FakeHarness())
    assert [label for label, _ in fake] == [label for label, _ in real]
    for (label, got), (_, want) in zip(fake, real, strict=True):
        diff = differences(got, want)
        assert not diff, f"step {label!r} on Slurm {slurm.release}:\n" + "\n".join(diff)
