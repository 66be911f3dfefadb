"""The restart-aware rounds' settings (``PluginSettings.restart_aware``, plugin_settings.py)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RestartAwareSettings:
    # Not Gavel, opt-in: restart-aware rounds (restart_aware.py says how and why). Each
    # run of a job is kept where it is for its restart cost / budget seconds, so
    # restarts cost a job at most that share of its GPU time; the stay credit is then
    # not applied. The cost: measured per job (daemon), else the job's own, else the
    # round's preemption overhead. YAML: restart_aware, restart_budget.
    enabled: bool = False
    budget: float = 0.1
