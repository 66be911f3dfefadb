"""fifo: Gavel's heterogeneity-aware FIFO (FIFOPolicyWithPerf).

Jobs in arrival order (see fifo_queue) each take the type with room on which
they run fastest; ties go to the type listed first in the cluster. The
objective is the number of jobs placed.
"""

from __future__ import annotations

from slurm_gavel.domain.model import Allocation, GpuType, Problem, ProblemJob
from slurm_gavel.policies import PolicyOptions
from slurm_gavel.policies.solvers.fifo_queue import fifo_allocate


def fastest(job: ProblemJob, room: list[GpuType], free: dict[GpuType, int]) -> GpuType:
    return max(room, key=lambda t: job.throughput.get(t, 0.0))  # first of equals wins


def allocate(problem: Problem, options: PolicyOptions) -> Allocation:
    return fifo_allocate(problem, "fifo", fastest)
