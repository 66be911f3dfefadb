"""What a scheduling round reports (RoundReport): its placement, what the backend did
with it, the jobs that completed and those it could not consider. The daemon logs,
publishes and counts it; the simulator sums it up."""

from __future__ import annotations

from dataclasses import dataclass

from slurm_gavel.core.cluster_rows import MarkedCell
from slurm_gavel.core.skips import Skip
from slurm_gavel.domain.cluster_model import ActResult, ObservedJob, RoundPlacement
from slurm_gavel.domain.model import JobId


@dataclass(frozen=True)
class RoundReport:
    round_index: int
    time: float
    reallocated: bool
    solve_seconds: float
    placement: RoundPlacement
    result: ActResult
    active_jobs: int
    completed: tuple[ObservedJob, ...] = ()
    # jobs the round could not consider, with the reason (unknown type, no GPU type
    # it can run on); the daemon logs these once per job
    skipped: tuple[tuple[JobId, Skip], ...] = ()
    mechanism_seconds: float = 0.0
    # cells of the cluster's GPU types the considered jobs rely on without a
    # measurement: (job type, scale factor, GPU type, "estimate" or "unmeasured:
    # type-blind"), see cluster_rows.py; the daemon logs each once, status shows them
    unmeasured: tuple[MarkedCell, ...] = ()
