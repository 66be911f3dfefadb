"""max_sum_throughput: maximise the cluster's total steps/s (Gavel's ThroughputSumWithPerf).

Maximise sum_j sum_t T_jt x_jt, raw steps/s: like Gavel's ThroughputSumWithPerf
(which delegates to ThroughputNormalizedByCostSumWithPerfSLOs with unit costs and
no SLOs) the objective carries neither a normalisation nor the scale factor; the
scale factor enters only the capacity constraint sum_j s_j x_jt <= cap_t. (That
code computes a per-job normaliser 1/sum_t T_jt but never uses it; neither do we.)
Rows sum to <= 1; x_jt = 0 where T_jt = 0 or s_j > cap_t.

The LP has many optima (any split of time among equally fast jobs); which one is
returned is the solver's choice. Allocation.objective is the total steps/s.
Fast path: the exact class LP (classes.py) on HiGHS; reference: job-level cvxpy.
"""

from __future__ import annotations

import numpy as np

from slurm_gavel.domain.model import Allocation, Problem
from slurm_gavel.policies import PolicyOptions
from slurm_gavel.policies.solvers.classes import group_jobs
from slurm_gavel.policies.solvers.mm_disaggregate import job_fractions
from slurm_gavel.policies.solvers.mm_lp import solve_sum_classes

NAME = "max_sum_throughput"


def allocate(problem: Problem, options: PolicyOptions) -> Allocation:
    if options.reference:
        # cvxpy (~1 s to import) only for the reference path
        from slurm_gavel.policies.solvers.mm_reference import job_level, solve_reference

        lp = job_level(problem, with_pairs=False)
        gain = np.where(lp.allowed, lp.throughput, 0.0)
        return solve_reference(problem, NAME, lp, gain, lp.pair_rate, objective="sum")
    classes = group_jobs(problem)
    allowed = classes.allowed()
    gain = np.where(allowed, classes.throughput, 0.0)
    x = solve_sum_classes(
        gain, allowed, classes.scale, classes.count, classes.capacity,
        time_limit=options.time_limit,
    )  # fmt: skip
    objective = float((classes.count[:, None] * gain * x).sum())
    return Allocation(NAME, job_fractions(problem, classes, x), objective=objective)
