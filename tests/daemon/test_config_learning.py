"""The daemon config's `learning:` section (daemon/config_learning.py): defaults, and
every bad value refused with the key named."""

from __future__ import annotations

import math

import pytest

from slurm_gavel.core.learned_rows.explore import Exploration
from slurm_gavel.core.learned_rows.job_rows import Knowledge
from slurm_gavel.core.learned_rows.row_trust import TrustBounds
from slurm_gavel.daemon.config import parse_config
from slurm_gavel.daemon.config_types import ConfigError


def test_defaults_learn_with_bounds_and_no_exploration():
    cfg = parse_config({"partitions": ["gpu"]})
    assert cfg.learning.knowledge is Knowledge.LEARNED
    assert cfg.plugins.learned_rows.bounds == TrustBounds()
    assert cfg.plugins.learned_rows.explore is None


def test_every_key_is_read():
    cfg = parse_config(
        {
            "partitions": ["gpu"],
            "learning": {
                "knowledge": "table",
                "ratio_factor": 2,
                "step_factor": 1.25,
                "start_allowance_s": 90,
                "explore_max_gpu_seconds": 900,
                "explore_max_restarts": 1,
                "explore_bonus": 3,
            },
        }
    )
    assert cfg.learning.knowledge is Knowledge.TABLE
    assert cfg.plugins.learned_rows.bounds == TrustBounds(
        ratio_factor=2, step_factor=1.25, start_allowance_s=90
    )
    assert cfg.plugins.learned_rows.explore == Exploration(
        bonus=3, max_restarts=1, max_gpu_seconds=900
    )


@pytest.mark.parametrize(
    ("learning", "message"),
    [
        ({"knowledge": "oracle"}, "learning.knowledge: unknown value 'oracle'"),
        ({"ratio_factor": 0.5}, "learning.ratio_factor"),
        ({"ratio_factor": math.inf}, "learning.ratio_factor"),
        ({"step_factor": True}, "learning.step_factor"),
        ({"step_factor": 1e6}, "learning.step_factor: 1000000.0 is out of range"),
        ({"start_allowance_s": -1}, "learning.start_allowance_s"),
        ({"start_allowance_s": math.nan}, "learning.start_allowance_s"),
        ({"start_allowance_s": "30"}, "learning.start_allowance_s"),
        ({"start_allowance_s": 1e9}, "learning.start_allowance_s: 1000000000.0 is out of range"),
        ({"explore_max_gpu_seconds": -1}, "learning.explore_max_gpu_seconds"),
        ({"explore_max_gpu_seconds": 5, "explore_bonus": math.nan}, "learning.explore_bonus"),
        ({"explore_max_gpu_seconds": 5, "explore_max_restarts": -1}, "explore_max_restarts"),
        ({"ratio_factr": 2}, "unknown key 'ratio_factr'"),
        ("learned", "learning: expected a mapping"),
    ],
)
def test_bad_values_name_the_key(learning, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(")):
        parse_config({"partitions": ["gpu"], "learning": learning})
