"""The learned rows' plugin (``knowledge: learned``; round_plugins.py has the table of
plugins): at enrich, each job's progress into its own row (job_rows.py), with its
settings in learned_rows_settings.py and its state, ``JobRows``, in job_rows.py.
"""

from __future__ import annotations

from dataclasses import dataclass

from slurm_gavel.core.learned_rows.job_rows import record_measurements
from slurm_gavel.core.restart_aware import restart_aware
from slurm_gavel.core.round_stages import RoundContext
from slurm_gavel.domain.model import JobId


@dataclass(frozen=True)
class LearnedRows:
    """Each job's progress into its own row (job_rows.py), within the trust bounds."""

    name: str = "learned_rows"

    def enrich(self, ctx: RoundContext) -> None:
        state, config = ctx.state, ctx.config
        own = config.plugins.learned_rows
        restart_s = None if own.bounds is None else restart_losses(ctx)
        record_measurements(
            state.plugins.learned_rows, ctx.active, state.placement, state.jobs, own.bounds,
            own.explore, restart_s,
        )  # fmt: skip


def restart_losses(ctx: RoundContext) -> dict[JobId, float]:
    """What each job's restarted runs are taken to have lost to start-up before their
    progress counts (job_rows.record_measurements): a restart's cost as the rounds plan
    it (restart_aware.restart_cost: measured per job, the job's own, its type's, the
    configured overhead). A job left out (no such figure: the daemon models none, its
    configured overhead 0, until it has measured the job's) is allowed the trust
    bounds' start_allowance_s."""
    state, config = ctx.state, ctx.config
    out: dict[JobId, float] = {}
    default = config.settings.preemption_overhead_seconds
    measured = state.plugins.restart_costs
    for o in ctx.active:
        cost = restart_aware.restart_cost(o.job, measured, config)
        known = (
            o.job.id in measured
            or o.job.restart_overhead is not None
            or o.job.job_type in config.restart_seconds_by_job_type
        )
        if known or default > 0.0:
            out[o.job.id] = cost
    return out
