"""Each round plugin's own settings (round_plugins.py): one frozen dataclass per
plugin, gathered by the plugin's name in ``PluginSettings`` (``SchedulerConfig.plugins``),
as its state is gathered in ``scheduler_state.PluginSlots``.

What the round as a whole is set by (its length, the restart overhead, when it
reallocates) stays in ``round_settings.RoundSettings``; what only one feature reads
lives here, with that feature's plugin reading nothing else. The daemon's config reads
them from the YAML keys named beside each field (``Config.plugins``, daemon/config.py)
and the one builder, daemon/scheduler_config.py, hands them to the round; the simulator
starts from the same (``simulate --config``) or from ``SIMULATOR_PLUGINS``, with its
command line's options over them (commands/simulate_settings.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from slurm_gavel.core.explore import Exploration
from slurm_gavel.core.row_trust import TrustBounds


@dataclass(frozen=True)
class MechanismSettings:
    # Not Gavel, opt-in (0 = Gavel's mechanism): the mechanism's stay credit (why:
    # mechanism.py), given in underloaded rounds only (round_plugins.stay_credit).
    # YAML: stay_credit_seconds.
    stay_credit_seconds: float = 0.0


@dataclass(frozen=True)
class RestartAwareSettings:
    # Not Gavel, opt-in: restart-aware rounds (restart_aware.py says how and why). Each
    # run of a job is kept where it is for its restart cost / budget seconds, so
    # restarts cost a job at most that share of its GPU time; the stay credit is then
    # not applied. The cost: measured per job (daemon), else the job's own, else the
    # round's preemption overhead. YAML: restart_aware, restart_budget.
    enabled: bool = False
    budget: float = 0.1


@dataclass(frozen=True)
class MoldableSettings:
    # Not Gavel, opt-in: a moldable job's count from one max-min LP over (GPU type,
    # count) (core/mold_joint.py) instead of least-first + grow into idle GPUs.
    # YAML: moldable_lp.
    lp: bool = False
    # Least-first under learned rows: a waiting moldable job may grow past the largest
    # count it has a row for, into GPUs no known gain takes (core/moldable.py, 2.). On
    # in the daemon (a real job just runs at the count); off in the simulator, whose
    # jobs have no true rate at a count the table lacks. YAML: moldable_untried.
    untried: bool = False


@dataclass(frozen=True)
class LearnedRowsSettings:
    # What a job's own reports may move its row by (row_trust.py), the same in the
    # daemon (its users write the reports) and the simulator (whose noisy reports go
    # through the same bounds). None takes measurements as they come: for ablations
    # only. YAML: learning.ratio_factor, step_factor, start_allowance_s.
    bounds: TrustBounds | None = field(default_factory=TrustBounds)
    # Exploration budget (explore.py): None, no optimism for unmeasured cells.
    # YAML: learning.explore_*.
    explore: Exploration | None = None


@dataclass(frozen=True)
class PluginSettings:
    """The plugins' settings, each under its plugin's name."""

    mechanism: MechanismSettings = field(default_factory=MechanismSettings)
    restart_aware: RestartAwareSettings = field(default_factory=RestartAwareSettings)
    moldable_counts: MoldableSettings = field(default_factory=MoldableSettings)
    learned_rows: LearnedRowsSettings = field(default_factory=LearnedRowsSettings)


# The daemon and the simulator differ in one plugin default (MoldableSettings.untried
# says why), set side by side as round_settings' DAEMON_DEFAULTS and SIMULATOR_DEFAULTS.
DAEMON_PLUGINS = PluginSettings(moldable_counts=MoldableSettings(untried=True))
SIMULATOR_PLUGINS = PluginSettings()
