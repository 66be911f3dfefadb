"""Gavel's mechanism as the round's default assign stage (round_plugins.py has the table
of plugins), with the stay credit (settings: plugin_settings.MechanismSettings), and
the round's helper that takes kept jobs' GPUs out of the nodes (``without_kept``), which
every assign stage that places around kept jobs uses.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

from slurm_gavel.core.mechanism import MechanismJob, assign, single_candidates
from slurm_gavel.core.plugin_settings import MechanismSettings
from slurm_gavel.core.round_jobs import mechanism_jobs
from slurm_gavel.core.round_stages import RoundContext
from slurm_gavel.domain.cluster_model import (
    JobPlacement,
    Node,
    NodeState,
)
from slurm_gavel.domain.model import GpuType, JobId


def without_kept(nodes: Iterable[Node], kept: Mapping[JobId, JobPlacement]) -> list[Node]:
    """The nodes with the GPUs of kept jobs on responding nodes (a job spread over an
    unresponsive and a responding node) taken out, so nothing else is put on them."""
    held: dict[str, int] = {}
    for p in kept.values():
        for s in p.nodes:
            held[s.node] = held.get(s.node, 0) + s.gpus
    return [
        replace(n, gpus_held_unmanaged=n.gpus_held_unmanaged + held[n.name])
        if n.name in held and n.state is NodeState.UP
        else n
        for n in nodes
    ]


def stay_credit(
    settings: MechanismSettings, jobs: Mapping[JobId, MechanismJob], usable: Mapping[GpuType, int]
) -> float:
    """The stay credit this round gives (mechanism.py says why): the configured one
    when the jobs fit in the usable GPUs in total, else 0, so that it only chooses
    a job's type and never keeps a waiting job queued."""
    if settings.stay_credit_seconds > 0.0:
        demand = sum(j.scale_factor for j in jobs.values())
        if demand <= sum(usable.values()):
            return settings.stay_credit_seconds
    return 0.0


@dataclass(frozen=True)
class Mechanism:
    """Gavel's mechanism: the considered jobs placed under the allocation in force (none
    without one), leaving out the kept jobs and the GPUs they hold."""

    name: str = "mechanism"

    def assign(self, ctx: RoundContext) -> dict[JobId, JobPlacement]:
        state, considered, kept = ctx.state, ctx.considered, ctx.kept
        if state.allocation is None or not considered:
            return {}
        jobs_m = mechanism_jobs(considered, state)
        nodes: Iterable[Node] = ctx.snap.nodes
        if kept:
            jobs_m = {j: m for j, m in jobs_m.items() if j not in kept}
            nodes = without_kept(nodes, kept)
        usable = {t: n for t, n in ctx.capacity.items() if n > 0}
        credit = stay_credit(ctx.config.plugins.mechanism, jobs_m, usable)
        memo = state.caches.memo
        singles = None
        if memo is not None and not kept:  # (the memo's candidates are every job's)
            if memo.singles_for is not state.allocation:
                memo.singles = single_candidates(state.allocation, jobs_m, list(ctx.capacity))
                memo.singles_for = state.allocation
            singles = memo.singles
        return assign(
            state.allocation,
            jobs_m,
            nodes,
            state.epoch_received,
            state.epoch_elapsed,
            stay_credit_seconds=credit,
            singles=singles,
        )
