"""The moldable counts' plugin (round_plugins.py has the table of plugins): at enrich,
each active job that gives a GPU range at this round's count (mold_round.py), with
its settings in moldable_settings.py and its state, ``MoldMemory``, in mold_round.py.
"""

from __future__ import annotations

from dataclasses import dataclass

from slurm_gavel.core.cluster_rows import rows_for
from slurm_gavel.core.learned_rows.job_rows import Knowledge
from slurm_gavel.core.moldable.mold_round import mold_jobs
from slurm_gavel.core.restart_aware import restart_aware
from slurm_gavel.core.round_stages import RoundContext
from slurm_gavel.domain.cluster_model import (
    NodeState,
    ObservedJob,
)


@dataclass(frozen=True)
class MoldableCounts:
    """The active jobs that give a GPU range, each at this round's count (mold_round.py)."""

    name: str = "moldable_counts"

    def enrich(self, ctx: RoundContext) -> None:
        state, config, nodes = ctx.state, ctx.config, ctx.snap.nodes
        active, memory = ctx.active, state.plugins.moldable_counts
        if not any(o.job.scale_range is not None for o in active) and not memory.holds_jobs():
            return
        capacity = ctx.capacity  # the round's allocation capacity, computed once
        rows = state.caches.cluster_rows = rows_for(
            state.caches.cluster_rows, config.table, capacity
        )
        learned = state.plugins.learned_rows if config.knowledge is Knowledge.LEARNED else None
        stuck = frozenset(n.name for n in nodes if n.state is NodeState.NOT_RESPONDING)

        measured = state.plugins.restart_costs

        def cost(o: ObservedJob) -> float:  # measured, else the job's own, else the default
            return restart_aware.restart_cost(o.job, measured, config)

        own = config.plugins.moldable_counts
        joint, untried = own.lp, own.untried and learned is not None
        of_type = {t: frozenset(n.name for n in nodes if n.gpu_type == t) for t in capacity}
        ctx.active = mold_jobs(
            memory, active, rows, capacity, learned, cost, stuck, joint, of_type, untried
        )
