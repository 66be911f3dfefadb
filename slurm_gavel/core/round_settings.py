"""The round's settings, defined once: one name, one unit (seconds), one default each.

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
    # Not Gavel, opt-in (0 = Gavel's mechanism): the mechanism's stay credit (why:
    # mechanism.py), given in underloaded rounds only (round_plugins.stay_credit).
    stay_credit_seconds: float = 0.0
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
    # Not Gavel, opt-in: restart-aware rounds (restart_aware.py says how and why). Each
    # run of a job is kept where it is for its restart cost / restart_budget seconds, so
    # restarts cost a job at most that share of its GPU time; the stay credit is then
    # not applied. The cost: measured per job (daemon), else the job's own, else
    # preemption_overhead_seconds.
    restart_aware: bool = False
    restart_budget: float = 0.1
    # Not Gavel, opt-in: a moldable job's count from one max-min LP over (GPU type,
    # count) (core/mold_joint.py) instead of least-first + grow into idle GPUs.
    moldable_lp: bool = False
    # Least-first under learned rows: a waiting moldable job may grow past the largest
    # count it has a row for, into GPUs no known gain takes (core/moldable.py, 2.). On
    # in the daemon (a real job just runs at the count); off in the simulator, whose
    # jobs have no true rate at a count the table lacks.
    moldable_untried: bool = False


# The daemon measures what a restart costs rather than modelling it: jobs that report
# progress report the steps they really made, and the overhead only shortens the
# estimate for jobs that report nothing, so it charges none unless the admin sets
# preemption_overhead_seconds. The simulator has no real job to measure; it charges
# a checkpoint and restore of 30 s per restart (simulate --preemption-overhead 0 is
# Gavel's simulator, which charges none).
DAEMON_DEFAULTS = RoundSettings(preemption_overhead_seconds=0.0, moldable_untried=True)
SIMULATOR_DEFAULTS = RoundSettings(preemption_overhead_seconds=30.0)
