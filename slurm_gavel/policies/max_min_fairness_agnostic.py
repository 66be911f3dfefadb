"""max_min_fairness_agnostic: max-min fairness blind to GPU-type differences (LAS-like).

The same LP as max_min_fairness with every T_jt replaced by 1 wherever the job can
run (T_jt > 0): a scheduler that sees only "a GPU" hands out equal normalised GPU
time and cannot steer jobs to the types they run fastest on. The objective
reported is that type-blind one; the real throughputs decide what jobs then
achieve (Allocation.effective_throughput). Same two stages and fast path.
"""

from __future__ import annotations

from slurm_gavel.domain.model import Allocation, Problem
from slurm_gavel.policies import PolicyOptions
from slurm_gavel.policies.solvers.mm_policy import allocate_max_min


def allocate(problem: Problem, options: PolicyOptions) -> Allocation:
    return allocate_max_min(
        problem, options, "max_min_fairness_agnostic", agnostic=True, packed=False
    )
