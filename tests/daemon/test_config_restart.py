"""The daemon config's restart_aware and restart_budget keys, with hostile values."""

from __future__ import annotations

import pytest

from slurm_gavel.core.restart_aware.restart_aware_settings import RestartAwareSettings
from slurm_gavel.daemon.config import parse_config
from slurm_gavel.daemon.config_types import ConfigError


def test_restart_aware_is_off_by_default_and_read_with_its_budget():
    cfg = parse_config({"partitions": ["gpu"]})
    assert cfg.plugins.restart_aware == RestartAwareSettings(enabled=False, budget=0.1)
    cfg = parse_config({"partitions": ["gpu"], "restart_aware": True, "restart_budget": 0.05})
    assert cfg.plugins.restart_aware == RestartAwareSettings(enabled=True, budget=0.05)


@pytest.mark.parametrize(
    "doc, needle",
    [
        ({"restart_aware": "yes"}, "restart_aware: expected true or false, got 'yes'"),
        ({"restart_aware": 1}, "restart_aware: expected true or false, got 1"),
        ({"restart_budget": 0}, "restart_budget: 0 is out of range; it must be > 0"),
        ({"restart_budget": -0.1}, "restart_budget: -0.1 is out of range"),
        ({"restart_budget": 1.5}, "restart_budget: 1.5 is a share of GPU time and must be <= 1"),
        ({"restart_budget": float("nan")}, "restart_budget: nan is not a finite number"),
        ({"restart_budget": "10%"}, "restart_budget: expected a number"),
        ({"restart_budget": True}, "restart_budget: expected a number"),
    ],
)
def test_hostile_values_are_named_with_the_fix(doc, needle):
    with pytest.raises(ConfigError) as e:
        parse_config({"partitions": ["gpu"], **doc})
    assert needle in str(e.value)
