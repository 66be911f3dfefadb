"""The one builder of the round's config (SchedulerConfig) from a daemon config.

The daemon calls it at start and on every reload; ``slurm-gavel simulate --config FILE``
calls it too and replaces only what a simulation sets itself (the policy under test,
the round's settings from the command line, the seed, what the scheduler knows of the
jobs' true rows), so a simulation with the daemon's config runs exactly the round the
daemon would: the same learning, reallocation and trust code with the same defaults.
"""

from __future__ import annotations

from slurm_gavel.core.round_config import SchedulerConfig
from slurm_gavel.daemon.config_types import Config
from slurm_gavel.domain.throughputs import ThroughputTable
from slurm_gavel.policies import PolicyOptions


def scheduler_config(config: Config, table: ThroughputTable) -> SchedulerConfig:
    """The round's settings from the daemon's config."""
    return SchedulerConfig(
        table=table,
        policy=config.policy,
        settings=config.settings,
        policy_options=PolicyOptions(time_limit=config.solver_time_limit_seconds),
        accounts=config.weights.accounts,  # hierarchical_max_min_fairness's entities
        prices=config.prices,
        knowledge=config.learning.knowledge,
        plugins=config.plugins,
    )
