"""max_min_fairness: Gavel's heterogeneity-aware max-min fairness (MaxMinFairnessPolicyWithPerf).

Maximise min_j s_j * sum_t T_jt x_jt / (w_j * P_j), P_j = sum_t T_jt cap_t / sum_t cap_t
(the normalisation docs/design.md §2.2 writes; Gavel's code divides by the job's rate under its
isolated share, which for unequal scale factors weighs them differently). Feasible
set: sum_t x_jt <= 1, sum_j s_j x_jt <= cap_t, x_jt = 0 where T_jt = 0 or s_j > cap_t.

Second stage (kept: it costs one warm-started re-solve of the class LP): with the
minimum held at its optimum (1 - 1e-9 relative), maximise the total normalised
throughput, so no GPU idles that some job could use without lowering the minimum.
Gavel stops at whichever optimal vertex its solver returns and can waste capacity.

Exact fast path over job classes; see mm_policy.py. Allocation.objective is the
realised minimum normalised throughput.
"""

from __future__ import annotations

from slurm_gavel.domain.model import Allocation, Problem
from slurm_gavel.policies import PolicyOptions
from slurm_gavel.policies.solvers.mm_policy import allocate_max_min


def allocate(problem: Problem, options: PolicyOptions) -> Allocation:
    return allocate_max_min(problem, options, "max_min_fairness", agnostic=False, packed=False)
