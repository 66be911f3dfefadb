"""Each round plugin's own settings (round_plugins.py): one frozen dataclass per
plugin, in the plugin's package (e.g. restart_aware/restart_aware_settings.py; the
mechanism's, the round's default, here), gathered by the plugin's name in
``PluginSettings`` (``SchedulerConfig.plugins``), as its state is gathered in
``scheduler_state.PluginSlots``.

What the round as a whole is set by (its length, the restart overhead, when it
reallocates) stays in ``round_settings.RoundSettings``; what only one feature reads
lives in its package, with that feature's plugin reading nothing else. The daemon's config reads
them from the YAML keys named beside each field (``Config.plugins``, daemon/config.py)
and the one builder, daemon/scheduler_config.py, hands them to the round; the simulator
starts from the same (``simulate --config``) or from ``SIMULATOR_PLUGINS``, with its
command line's options over them (commands/simulate_settings.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from slurm_gavel.core.learned_rows.learned_rows_settings import LearnedRowsSettings
from slurm_gavel.core.moldable.moldable_settings import MoldableSettings
from slurm_gavel.core.restart_aware.restart_aware_settings import RestartAwareSettings


@dataclass(frozen=True)
class MechanismSettings:
    # Not Gavel, opt-in (0 = Gavel's mechanism): the mechanism's stay credit (why:
    # mechanism.py), given in underloaded rounds only (mechanism_plugin.stay_credit).
    # YAML: stay_credit_seconds.
    stay_credit_seconds: float = 0.0


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
