"""fifo_agnostic: Gavel's FIFO that ignores speed (FIFOPolicy, mode 'base').

Jobs in arrival order (see fifo_queue) each take a type with room where they
can run, whatever its speed. Gavel picks that type at random (seeded); we pick
deterministically the type with the most free GPUs (first listed on ties), which
like the random choice spreads jobs over the types without looking at
throughputs, and gives the same answer for the same problem every round.
The objective is the number of jobs placed.
"""

from __future__ import annotations

from slurm_gavel.model import Allocation, GpuType, Problem, ProblemJob
from slurm_gavel.policies import PolicyOptions
from slurm_gavel.policies.fifo_queue import fifo_allocate


def most_free(job: ProblemJob, room: list[GpuType], free: dict[GpuType, int]) -> GpuType:
    return max(room, key=lambda t: free[t])  # first of equals wins


def allocate(problem: Problem, options: PolicyOptions) -> Allocation:
    return fifo_allocate(problem, "fifo_agnostic", most_free)
