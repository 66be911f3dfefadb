"""The round's own settings, defined once: one name, one unit (seconds), one default
each. A feature's settings are its plugin's (plugin_settings.py), not these.

The daemon's config (`Config.settings`, read from the YAML keys of the same names),
the simulator's options (`SimulationOptions.settings`, the `simulate` options) and
the round itself (`SchedulerConfig.settings`) embed this one dataclass; nothing
copies its fields by hand.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
class RoundSettings:
    # The round's length: the daemon sleeps what is left of it, the simulator
    # advances its clock by it (or less, when every placed job has finished).
    round_seconds: float = 360.0
    # Seconds of work a job loses per restart (checkpoint, requeue, restore). No
    # default here on purpose: the daemon and the simulator need different ones
    # (DAEMON_DEFAULTS and SIMULATOR_DEFAULTS below), so who builds settings says which.
    preemption_overhead_seconds: float
    # After a reallocation, a changed job set waits until this many seconds have
    # passed before the next one (jobs that arrive meanwhile get no fraction and only
    # fill GPUs the allocation leaves idle). 0 = recompute on every change, as the
    # Gavel paper describes; Gavel's code does this in simulation with its
    # minimum_time_between_allocation_resets = 1,920 s.
    min_reallocation_interval_seconds: float = 0.0
    # Recompute the allocation at least this often even when the job set is the same
    # (policies that read progress, e.g. finish_time_fairness); None = only on change.
    # The simulator's --reallocate-every; the daemon's config has no key for it.
    reallocate_every_seconds: float | None = None


# The daemon measures what a restart costs rather than modelling it: jobs that report
# progress report the steps they really made, and the overhead only shortens the
# estimate for jobs that report nothing, so it charges none unless the admin sets
# preemption_overhead_seconds. The simulator has no real job to measure; it charges
# a checkpoint and restore of 30 s per restart (simulate --preemption-overhead 0 is
# Gavel's simulator, which charges none).
DAEMON_DEFAULTS = RoundSettings(preemption_overhead_seconds=0.0)
SIMULATOR_DEFAULTS = RoundSettings(preemption_overhead_seconds=30.0)
