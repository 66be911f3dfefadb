"""isolated: the equal-share baseline (Gavel's IsolatedPolicy).

Every job gets a 1/n share of every GPU type in GPU time: x_jt = cap_t / (n s_j)
(so sum_j s_j x_jt = cap_t), then each row is scaled down to sum to at most 1
(Gavel divides each row by max(row sum, 1)). Unlike Gavel, time on a type where
the job cannot run (T_jt = 0, or s_j > cap_t) is dropped before that scaling:
the share of that type idles instead of being booked as useless time. No LP.
Allocation.objective is None.
"""

from __future__ import annotations

import numpy as np

from slurm_gavel.domain.model import Allocation, Problem
from slurm_gavel.policies import PolicyOptions


def allocate(problem: Problem, options: PolicyOptions) -> Allocation:
    types = problem.gpu_types
    n = len(problem.jobs)
    cap = np.array([float(problem.cluster[t]) for t in types])
    tput = np.array([[j.throughput.get(t, 0.0) for t in types] for j in problem.jobs])
    tput = tput.reshape(n, len(types))
    scale = np.array([float(j.scale_factor) for j in problem.jobs])
    x = np.zeros((n, len(types)))
    if n:
        x = np.broadcast_to(cap / n, (n, len(types))) / scale[:, None]
        x = np.where((tput > 0) & (scale[:, None] <= cap[None, :]), x, 0.0)
        x = x / np.maximum(x.sum(axis=1), 1.0)[:, None]
    fractions = {
        job.id: dict(zip(types, map(float, row), strict=True))
        for job, row in zip(problem.jobs, x, strict=True)
    }
    return Allocation("isolated", fractions)
