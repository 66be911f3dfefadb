"""The daemon config's ``learning:`` section: whose throughput rows the rounds use and
what a job's own progress reports may move (core/learned_rows/job_rows.py, row_trust.py).

    learning:
      knowledge: learned      # learned (default): each job's own row, from its prior
                              # and its measurements; table: its type's row (jobs of
                              # a type the table lacks are given back to Slurm)
      ratio_factor: 4         # a job's ratios between GPU types stay within this
                              # factor of its prior's
      step_factor: 1.5        # a measured cell moves at most this much per round
      start_allowance_s: 30   # the most a restarted run is taken to have lost to
                              # start-up; a reported rate its steps do not show with
                              # this much lost per run is logged (row_trust.Progress)
      explore_max_gpu_seconds: 0   # > 0: exploration on (core/learned_rows/explore.py): a job's
                              # unmeasured GPU types look explore_bonus x better until
                              # it has had this much GPU time or explore_max_restarts
      explore_max_restarts: 2
      explore_bonus: 2
"""

from __future__ import annotations

from typing import Any

from slurm_gavel.core.learned_rows.explore import Exploration
from slurm_gavel.core.learned_rows.job_rows import Knowledge
from slurm_gavel.core.learned_rows.learned_rows_settings import LearnedRowsSettings
from slurm_gavel.core.learned_rows.row_trust import TrustBounds
from slurm_gavel.daemon.config_types import ConfigError, LearningConfig
from slurm_gavel.domain.field_checks import Checks

KNOWLEDGE = (Knowledge.LEARNED.value, Knowledge.TABLE.value)
KEYS = [
    "knowledge",
    "ratio_factor",
    "step_factor",
    "start_allowance_s",
    "explore_max_gpu_seconds",
    "explore_max_restarts",
    "explore_bonus",
]

_check = Checks(ConfigError)


def learning_config(doc: Any, where: str) -> tuple[LearningConfig, LearnedRowsSettings]:
    """The section: whose rows the rounds use, and the learned rows plugin's settings."""
    d = _check.mapping(doc, where)
    _check.keys(d, KEYS, where)
    base = TrustBounds()

    def factor(key: str, default: float) -> float:
        v = _check.number(d.get(key, default), f"{where}.{key}", minimum=1)
        if v > 1000:
            raise ConfigError(f"{where}.{key}: {v!r} is out of range; it must be 1..1000")
        return v

    allowance = _check.number(
        d.get("start_allowance_s", base.start_allowance_s), f"{where}.start_allowance_s",
        minimum=0,
    )  # fmt: skip
    if allowance > 86400:
        raise ConfigError(f"{where}.start_allowance_s: {allowance!r} is out of range; 0..86400")
    seconds = _check.number(
        d.get("explore_max_gpu_seconds", 0), f"{where}.explore_max_gpu_seconds", minimum=0
    )
    explore = None
    if seconds > 0:
        base_x = Exploration()
        explore = Exploration(
            bonus=factor("explore_bonus", base_x.bonus),
            max_restarts=_check.integer(
                d.get("explore_max_restarts", base_x.max_restarts),
                f"{where}.explore_max_restarts",
                lo=0,
                hi=1000,
            ),
            max_gpu_seconds=seconds,
        )
    knowledge = _check.choice(
        d.get("knowledge", Knowledge.LEARNED.value), f"{where}.knowledge", KNOWLEDGE
    )
    bounds = TrustBounds(
        ratio_factor=factor("ratio_factor", base.ratio_factor),
        step_factor=factor("step_factor", base.step_factor),
        start_allowance_s=allowance,
    )
    return LearningConfig(Knowledge(knowledge)), LearnedRowsSettings(bounds, explore)
