"""The restart-aware rounds' plugin (``restart_aware``; round_plugins.py has the table of
plugins): keep, assign and after the act, with the logic in restart_aware.py, its
settings in restart_aware_settings.py and its state, ``RunProtection``, in
run_protection.py.
"""

from __future__ import annotations

from dataclasses import dataclass

from slurm_gavel.core.mechanism_plugin import without_kept
from slurm_gavel.core.restart_aware import restart_aware
from slurm_gavel.core.round_stages import RoundContext
from slurm_gavel.domain.cluster_model import (
    JobPlacement,
)
from slurm_gavel.domain.model import JobId


@dataclass(frozen=True)
class RestartAware:
    """Restart-aware rounds (restart_aware.py): protected runs kept where they run, the
    mechanism around them without the stay credit, and each new run protected once
    the backend started it (backfilled ones excepted)."""

    name: str = "restart_aware"

    def keep(self, ctx: RoundContext) -> dict[JobId, JobPlacement]:
        return restart_aware.protected_runs(
            ctx.state, ctx.considered, ctx.snap.nodes, ctx.now, ctx.config
        )

    def assign(self, ctx: RoundContext) -> dict[JobId, JobPlacement]:
        kept = ctx.kept
        free = without_kept(ctx.snap.nodes, kept) if kept else list(ctx.snap.nodes)
        placed, backfill = restart_aware.assign_around(
            ctx.state, ctx.config, ctx.considered, free, kept, ctx.capacity, ctx.now
        )
        ctx.notes[self.name] = backfill
        return placed

    def after_act(self, ctx: RoundContext) -> None:
        jobs = {o.job.id: o.job for o in ctx.active}
        backfill: set[JobId] = ctx.notes.get(self.name, set())
        restart_aware.protect_new_runs(ctx.state, ctx.config, ctx.previous, jobs, backfill, ctx.now)
