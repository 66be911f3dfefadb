"""The daemon's configuration as dataclasses: each key, what it means, its default.

config.py reads and validates the file into these; everything else reads them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from slurm_gavel.core.learned_rows.job_rows import Knowledge
from slurm_gavel.core.plugin_settings import DAEMON_PLUGINS, PluginSettings
from slurm_gavel.core.priority_weights import WeightsConfig
from slurm_gavel.core.round_settings import DAEMON_DEFAULTS, RoundSettings
from slurm_gavel.errors import InputError

BACKENDS = ("cli", "rest")
LOG_FORMATS = ("json", "kv")
LOG_LEVELS = ("debug", "info", "warning", "error")
# Who sees which managed jobs in `slurm-gavel status` (status_private.py): auto follows
# Slurm's PrivateData (private when it hides jobs), public = every user sees every job,
# private = each user sees only their own.
STATUS_PRIVACY = ("auto", "public", "private")


class ConfigError(InputError):
    """The daemon configuration is wrong; the message names the key and the fix."""


@dataclass(frozen=True)
class CheckpointConfig:
    # Signal sent to the batch shell to ask a job to checkpoint and exit (name without SIG).
    signal: str = "USR1"
    # Seconds a job gets to exit after the signal before the daemon requeue-holds it.
    grace_seconds: float = 30.0
    # Most seconds a job may ask for with grace= (--gavel-grace); a longer ask is capped.
    # None: grace_seconds, so no job gets longer than the site's grace until the admin says.
    max_grace_seconds: float | None = None

    @property
    def grace_cap(self) -> float:
        return self.grace_seconds if self.max_grace_seconds is None else self.max_grace_seconds

    # Exit code meaning "checkpointed, requeue me held"; must equal RequeueExitHold.
    requeue_exit_code: int = 99
    # A crash loop (daemon/run_watch.py): a job whose runs end this many times in a row
    # without the checkpoint signal, each shorter than short_run_seconds (it exits 99 at
    # once, or fails to launch), is given back to Slurm with the reason.
    max_unsignalled_restarts: int = 3
    short_run_seconds: float = 600.0
    # A job still running at its grace end this many times in a row (the daemon
    # requeue-held it: it lost its work since its last checkpoint each time) is given
    # back to Slurm, which runs it to its end unpreempted; warned before.
    max_ignored_signals: int = 3


@dataclass(frozen=True)
class SlurmConfig:
    # Seconds before one sinfo/squeue/scontrol call is abandoned.
    command_timeout_seconds: float = 30.0
    # While slurmctld does not answer the daemon waits and retries, doubling the
    # wait from retry_initial_seconds up to retry_max_seconds; it never gives up.
    retry_initial_seconds: float = 1.0
    retry_max_seconds: float = 60.0
    # backend: rest only.
    rest_url: str = "http://localhost:6820"
    rest_token_file: Path | None = None  # a JWT (scontrol token), for http(s) URLs
    rest_user: str | None = None  # the user the JWT belongs to (X-SLURM-USER-NAME)
    # Re-read rest_token_file this often (also at once when slurmrestd refuses it).
    rest_token_reread_seconds: float = 300.0


@dataclass(frozen=True)
class LearningConfig:
    """``learning:`` (config_learning.py): whose rows the rounds use (each job's own,
    learned from its prior; or its type's). What a job's reports may move, and the
    exploration, are the learned rows plugin's settings (``Config.plugins``)."""

    knowledge: Knowledge = Knowledge.LEARNED


@dataclass(frozen=True)
class HaConfig:
    """``ha:`` (config_ha.py): active/standby daemons sharing one state directory
    (daemon/lease.py). Absent: one daemon, its state directory locked, as always."""

    shared_dir: Path  # the state directory every host's daemon shares (its state_dir)
    lease_seconds: float = 30.0  # a standby takes over after this long without renewal
    # The leader stops acting this long before its lease could expire: covers the
    # hosts' clock rates, the storage's delay in showing a write, and a command's start.
    margin_seconds: float | None = None  # None: lease_seconds / 4

    @property
    def margin(self) -> float:
        return self.lease_seconds / 4 if self.margin_seconds is None else self.margin_seconds


@dataclass(frozen=True)
class Config:
    partitions: tuple[str, ...]
    policy: str = "max_min_fairness"
    # round_seconds, preemption_overhead_seconds and min_reallocation_interval_seconds:
    # top-level keys of the file, as in RoundSettings.
    settings: RoundSettings = DAEMON_DEFAULTS
    # The round plugins' settings (core/plugin_settings.py): top-level keys of the file
    # (stay_credit_seconds, restart_aware, restart_budget, moldable_lp, moldable_untried)
    # and the learning section's bounds and exploration.
    plugins: PluginSettings = DAEMON_PLUGINS
    # Slurm GRES type -> throughput-table GPU type, for sites whose names differ.
    gpu_types: Mapping[str, str] = field(default_factory=dict)
    # Dollars per GPU-hour by throughput-table GPU type: what policy min_cost minimises.
    prices: Mapping[str, float] = field(default_factory=dict)
    # Shares from the admin: weights by QOS and account, the cap on a user's own weight.
    weights: WeightsConfig = field(default_factory=WeightsConfig)
    throughput_table: Path | None = None  # None = the table shipped with the package
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    solver_time_limit_seconds: float | None = None
    state_dir: Path = Path("/var/lib/slurm-gavel")
    status_privacy: str = "auto"  # one of STATUS_PRIVACY
    progress_dir: Path | None = None  # the job-side progress spool (GAVEL_PROGRESS_DIR)
    metrics_port: int = 0  # 0 = no metrics endpoint
    metrics_address: str = "127.0.0.1"
    backend: str = "cli"
    slurm: SlurmConfig = field(default_factory=SlurmConfig)
    log_format: str = "kv"
    log_level: str = "info"
    # Whose throughput rows the rounds use, and the bounds on what reports may move.
    learning: LearningConfig = field(default_factory=LearningConfig)
    ha: HaConfig | None = None  # None: a single daemon (no standby)
    source: Path | None = None  # the file this was read from (for messages)
