"""The space-sharing plugin (Gavel's packed policies; round_plugins.py has the table of
plugins): no settings, no state.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from slurm_gavel.core.round_config import SchedulerConfig
from slurm_gavel.core.round_report import RoundReport
from slurm_gavel.core.scheduler_state import SchedulerState
from slurm_gavel.domain.model import Problem


@dataclass(frozen=True)
class SpaceSharing:
    """Space sharing, Gavel's packed policies (``PACKING_POLICIES``: the policy is what
    turns it on; it has no settings and keeps nothing between rounds). Its pose gives
    the policy the throughputs of every pair of the considered jobs' kinds sharing
    GPUs, from the table's pair cells, so that the allocation can give pairs time of
    their own (``Allocation.pairs``). What follows needs no plugin: the mechanism
    places a pair with time as one entry of its own (mechanism.py; an allocation
    without pairs has none), the accounting keys its time by ``mechanism.pair_key``,
    and a re-solve resets that accounting (relearn.keeps_accounting). Its steady
    answer keeps the simulator from jumping over rounds while pairs may form or
    split: a pair that has time, or a job placed with a partner."""

    name: str = "space_sharing"

    def pose(self, config: SchedulerConfig, problem: Problem) -> Problem:
        kinds = [(j.job_type, j.scale_factor) for j in problem.jobs]
        pairs = tuple(config.table.pair_throughputs(kinds, problem.gpu_types))
        return replace(problem, pair_throughputs=pairs)

    def steady(self, state: SchedulerState, report: RoundReport) -> bool:
        alloc = state.allocation
        if alloc is not None and any(sum(p.fractions.values()) > 0 for p in alloc.pairs):
            return False
        return all(p.partner is None for p in report.placement.jobs.values())
