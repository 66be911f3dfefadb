"""The baseline's plugin (the simulator's Slurm FIFO baselines; round_plugins.py has the
table of plugins): it replaces the allocation and the mechanism. No settings, no state.
"""

from __future__ import annotations

from dataclasses import dataclass

from slurm_gavel.core.round_config import BaselineFn
from slurm_gavel.core.round_stages import RoundContext
from slurm_gavel.domain.cluster_model import (
    JobPlacement,
)
from slurm_gavel.domain.model import JobId


@dataclass(frozen=True)
class Baseline:
    """A pseudo-policy that places the jobs itself (the simulator's Slurm FIFO
    baselines): no allocation, no mechanism."""

    place: BaselineFn
    name: str = "baseline"

    def assign(self, ctx: RoundContext) -> dict[JobId, JobPlacement]:
        return self.place(ctx.snap, ctx.config)
