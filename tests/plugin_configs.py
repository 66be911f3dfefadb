"""The simulator's round settings and plugin settings with one thing changed, for the
tests of the round's features (each plugin's own settings: core/plugin_settings.py)."""

from __future__ import annotations

from dataclasses import replace

from slurm_gavel.core.moldable.moldable_settings import MoldableSettings
from slurm_gavel.core.plugin_settings import SIMULATOR_PLUGINS, PluginSettings
from slurm_gavel.core.restart_aware.restart_aware_settings import RestartAwareSettings
from slurm_gavel.core.round_settings import SIMULATOR_DEFAULTS, RoundSettings


def overhead(cost: float) -> RoundSettings:
    """The simulator's round settings with this restart overhead (seconds)."""
    return replace(SIMULATOR_DEFAULTS, preemption_overhead_seconds=cost)


def restart_aware(on: bool = True, budget: float = 0.1) -> PluginSettings:
    """The simulator's plugin settings with restart-aware rounds on (or off)."""
    return replace(SIMULATOR_PLUGINS, restart_aware=RestartAwareSettings(on, budget))


def moldable(lp: bool = False, untried: bool = False) -> PluginSettings:
    """The simulator's plugin settings with these moldable-count settings."""
    return replace(SIMULATOR_PLUGINS, moldable_counts=MoldableSettings(lp, untried))
