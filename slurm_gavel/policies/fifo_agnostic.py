"""fifo_agnostic: Gavel's FIFO that ignores speed (FIFOPolicy, mode 'base').

Jobs in arrival order (see fifo_queue) each take a type with room where they
can run, whatever its speed. Gavel means to pick that type at random (seeded).
Taking the first type in the cluster's order instead, as this policy once did,
is not type-blind: with the fastest type listed first (v100, p100, k80) it put
jobs on the fastest GPUs whenever they had room.

Gavel's own code does not do what it means either (policies/fifo.py at c4fa4009,
mode 'base'): it draws a random index but never turns it into a type, so every
job goes to the alphabetically last type that has a free GPU, v100 in Gavel's
clusters, even past its capacity (20 single-GPU jobs on 12 V100s, 8 4-GPU jobs on
12 V100s; the round mechanism then runs what fits). Its agnostic FIFO figures
are therefore V100-first, not type-blind, and this policy does not copy that.

The rule here is Gavel's random choice made deterministic and stable: weighted
rendezvous hashing. Each job draws, from a hash of its id and the type's name,
an exponential "arrival" E_t / cap_t per type (E_t ~ Exp(1)) and takes the type
with room whose draw comes first. Over jobs, a type is a job's first choice with
probability cap_t / sum of cap over the types it can use (its capacity share, the
same split as max_min_fairness_agnostic), and a job's order of preference never
changes, so it keeps its type from round to round unless room opens up on a type
it prefers (choosing the type with the most free GPUs instead restarted jobs 13x
as often in a 60-job simulation). Jobs prefer different types, so that happens
more than when all preferred the first listed: 736 restarts against 171 on the
60-job multi-GPU trace of benchmarks/crosscheck_gavel.py, 0 against 13 on the
single-GPU one. Same problem, same answer, in every process.
The objective is the number of jobs placed.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping

from slurm_gavel.domain.model import Allocation, GpuType, Problem, ProblemJob
from slurm_gavel.policies import PolicyOptions
from slurm_gavel.policies.solvers.fifo_queue import fifo_allocate


def unit_draw(job_id: str, gpu_type: GpuType) -> float:
    """A number in (0, 1), uniform over ids, fixed for (job, type): no process salt."""
    digest = hashlib.blake2b(f"{job_id}\0{gpu_type}".encode(), digest_size=8).digest()
    return (int.from_bytes(digest, "big") + 0.5) / 2.0**64


def preferred(job: ProblemJob, room: list[GpuType], capacity: Mapping[GpuType, int]) -> GpuType:
    """The type with room whose capacity-weighted exponential draw comes first."""
    return min(room, key=lambda t: -math.log(unit_draw(str(job.id), t)) / capacity[t])


def allocate(problem: Problem, options: PolicyOptions) -> Allocation:
    capacity = problem.cluster
    return fifo_allocate(
        problem, "fifo_agnostic", lambda job, room, free: preferred(job, room, capacity)
    )
