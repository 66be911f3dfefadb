"""The unresponsive nodes' plugin (round_plugins.py has the table of plugins): at keep,
the runs on nodes that stopped answering. No settings, no state.
"""

from __future__ import annotations

from dataclasses import dataclass

from slurm_gavel.core.round_stages import RoundContext
from slurm_gavel.domain.cluster_model import (
    JobPlacement,
    JobState,
    NodeState,
)
from slurm_gavel.domain.model import JobId


@dataclass(frozen=True)
class UnresponsiveNodes:
    """Running jobs with a GPU on a NOT_RESPONDING node, each kept at the place it runs
    now (the previous round's placement when it is the same: it knows if it is
    consolidated), whatever the allocation says: their processes outlive slurmd and
    could not take the checkpoint signal, so they keep their placement and time
    accounting, and the node takes nothing new, until Slurm declares the node DOWN
    (then it requeues them itself) or it answers again."""

    name: str = "unresponsive_nodes"

    def keep(self, ctx: RoundContext) -> dict[JobId, JobPlacement]:
        nodes, previous = ctx.snap.nodes, ctx.state.placement
        unresponsive = {n.name for n in nodes if n.state is NodeState.NOT_RESPONDING}
        if not unresponsive:
            return {}
        kept: dict[JobId, JobPlacement] = {}
        for o in ctx.active:
            if o.state is not JobState.RUNNING or o.gpu_type is None:
                continue
            if any(s.node in unresponsive for s in o.nodes):
                here = JobPlacement(o.job.id, o.gpu_type, o.nodes, o.partner)
                prev = previous.get(o.job.id)
                kept[o.job.id] = prev if prev is not None and prev.same_place(here) else here
        return kept
