"""min_cost's LP over single jobs by decomposition (dw.py), for per-job rows.

    max sum_j v_j . x_j  s.t.  a_j . x_j >= need_j (SLO jobs), sum_t x_jt <= 1,
                               sum_j s_j x_jt <= cap_t

Per job the constraints are dw.py's polytope Q_j(need_j) (for jobs without an SLO
need_j = 0 and Q_j is the simplex; its w / a_t vertices coincide with 0 and are
left out, so that they do not look like ties). dw.max_value needs a feasible start
for its master: 0 without SLOs; with SLOs the allocation of dw.min_beta (every
SLO met on beta * cap), which is feasible when beta <= 1. When beta > 1 the SLOs
cannot all be met together: None, and the caller's class LP reports which jobs
fall short, as before. None also when the decomposition stalls. Every HiGHS run gets
what is left of the caller's Deadline (deadline.py); past it, SolverError.
"""

from __future__ import annotations

import numpy as np

from slurm_gavel.policies.solvers.deadline import NO_DEADLINE, Deadline
from slurm_gavel.policies.solvers.dw import (
    DwStalled,
    max_value,
    min_beta,
    vertices,
    worth_decomposing,
)
from slurm_gavel.policies.solvers.solve_paths import decomposed, fell_back

#: From this many runnable jobs on, when they form (almost) no classes.
DW_MIN_JOBS = 2000
DW_MIN_CLASS_SHARE = 0.5


def use_decomposition(n_jobs: int, n_classes: int, n_types: int) -> bool:
    return worth_decomposing(n_jobs, n_classes, n_types, DW_MIN_JOBS, DW_MIN_CLASS_SHARE)


def solve_decomposed(
    tput: np.ndarray,
    scale: np.ndarray,
    cap: np.ndarray,
    value: np.ndarray,
    need: np.ndarray,
    deadline: Deadline = NO_DEADLINE,
) -> np.ndarray | None:
    """x (N, K) for runnable jobs (rows of tput, 0 where a job may not run), or None."""
    n, k = tput.shape
    allowed = tput > 0
    w = np.minimum(need, tput.max(axis=1))  # need <= best checked by the caller; rounding
    verts = vertices(tput, allowed, w)
    verts.valid[w <= 0, :k] = False
    cap = cap.astype(np.float64)
    try:
        start = np.zeros((n, k))
        if (w > 0).any():
            first = min_beta(verts, scale, cap, deadline=deadline)
            if first.beta > 1.0:
                fell_back(
                    "min_cost", "slos_unmet",
                    f"the SLOs need {first.beta:.6g} times the cluster", expected=True,
                )  # fmt: skip
                return None
            start = first.x
        top = float(value.max()) or 1.0  # same argmax; the master's tolerances are absolute
        x = max_value(verts, value / top, scale, cap, start, deadline=deadline).x
    except DwStalled as e:
        fell_back("min_cost", e.reason, str(e))
        return None
    decomposed("min_cost")
    return x
