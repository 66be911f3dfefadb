"""What a scheduling round is given (SchedulerConfig) and what it reports (RoundReport).

Apart from scheduler.py so that the modules the round is built from (round_jobs.py)
can read the config without importing the round itself.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from slurm_gavel.core.learned_rows.job_rows import Knowledge, Row
from slurm_gavel.core.plugin_settings import DAEMON_PLUGINS, PluginSettings
from slurm_gavel.core.round_settings import DAEMON_DEFAULTS, RoundSettings
from slurm_gavel.domain.cluster_model import (
    ClusterSnapshot,
    JobPlacement,
)
from slurm_gavel.domain.model import GpuType, JobId
from slurm_gavel.domain.throughputs import ThroughputTable
from slurm_gavel.policies import PolicyOptions


@dataclass(frozen=True)
class SchedulerConfig:
    table: ThroughputTable
    policy: str = "max_min_fairness"
    # The round ignores the preemption overhead (the backend charges or estimates it).
    settings: RoundSettings = DAEMON_DEFAULTS
    policy_options: PolicyOptions = field(default_factory=PolicyOptions)
    accounts: Mapping[str, float] = field(default_factory=dict)
    prices: Mapping[GpuType, float] = field(default_factory=dict)
    # A pseudo-policy that places the jobs itself, bypassing allocation and mechanism
    # (the simulator's Slurm FIFO baselines, simulate/slurm_baseline.BASELINES): set
    # by whoever runs the round, so the round imports no simulator. None: the policy.
    baseline: BaselineFn | None = None
    # Whose throughput row each job is scheduled with (job_rows.py): its type's (TABLE,
    # today's and the daemon's), learned from its own measurements, given (ORACLE: the
    # rows in ``given_rows``, the simulator's true ones) or none (TYPE_BLIND).
    knowledge: Knowledge = Knowledge.TABLE
    given_rows: Mapping[JobId, Row] = field(default_factory=dict)
    # Restart cost per job type over settings.preemption_overhead_seconds (the
    # simulator's --overhead-for): what a job's restart is weighed by where nothing
    # better is known (restart_aware.restart_cost).
    restart_seconds_by_job_type: Mapping[str, float] = field(default_factory=dict)
    # Each round plugin's own settings, by the plugin's name (plugin_settings.py).
    plugins: PluginSettings = DAEMON_PLUGINS


# Called with the snapshot and the round's config; returns the placement.
BaselineFn = Callable[[ClusterSnapshot, SchedulerConfig], dict[JobId, JobPlacement]]
