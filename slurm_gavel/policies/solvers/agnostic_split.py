"""The type-blind max-min LP's answer, made symmetric: each job's time spread over its types.

In max_min_fairness_agnostic every type a job can run on counts as 1 step/s, so a
job's value depends only on its total time sum_t x_jt, never on how that time is
split over the types. The LP therefore has a whole face of optimal splits, and
which point of it a solver returns is an accident: HiGHS's simplex returns a
vertex, where each job sits on one type chosen by column order (so a
"type-blind" baseline ended up steering jobs, 12-17 % faster than Gavel's own
agnostic LAS on 60-job traces); Gavel's solver (ECOS, interior point, via cvxpy)
returns a point inside the face, each job spread over the types.

The rule here, well defined and independent of the solver: keep each job's total
time a_j from the LP (that is all the type-blind objective sees) and split it over
the types A_j the job can use in proportion to their capacity,

    p_jt = a_j * cap_t / sum_{u in A_j} cap_u        (t in A_j; 0 elsewhere).

Where every job can use every type this always fits (type t then carries cap_t
times the cluster's used fraction) and it is the point ECOS returns on an
overloaded cluster with every job on every type. Where jobs can use different
sets of types (a zero throughput, or more GPUs than a type has) the proportional
split can overfill a type; then the split is the feasible one closest to it: the
unique minimiser of sum_j sum_{t in A_j} (x_jt - p_jt)^2 / (cap_t / sum_{u in A_j}
cap_u) with the totals a_j and the capacities held (a small convex QP, HiGHS).
Should that QP fail, the LP's own split is kept: the totals, and so the
objective, are the same either way.
"""

from __future__ import annotations

import highspy
import numpy as np

from slurm_gavel.policies.solvers.silent_highs import new_highs

TOLERANCE = 1e-9  # relative overfill of a type we accept as solver noise


def capacity_shares(allowed: np.ndarray, capacity: np.ndarray) -> np.ndarray:
    """(R, K): cap_t / sum of cap over the row's allowed types; 0 where not allowed."""
    cap = np.where(allowed, capacity[None, :], 0.0)
    total = cap.sum(axis=1, keepdims=True)
    return np.divide(cap, total, out=np.zeros_like(cap), where=total > 0)


def spread_by_capacity(
    x: np.ndarray, allowed: np.ndarray, gpus: np.ndarray, weight: np.ndarray, capacity: np.ndarray
) -> np.ndarray:
    """Re-split each row's total time of `x` over its allowed types (see the module doc).

    x (R, K): one row per job or job class; allowed (R, K); gpus (R,): GPUs one unit
    of a row's time occupies (scale factor times jobs in the class); weight (R,):
    the row's weight in the distance (jobs in the class); capacity (K,).
    """
    totals = np.clip(x.sum(axis=1), 0.0, None)
    share = capacity_shares(allowed, capacity)
    target = totals[:, None] * share
    # Capacity as the LP's own split used it, if the solver went a hair over.
    cap = np.maximum(capacity, gpus @ x)
    if np.all(gpus @ target <= cap * (1 + TOLERANCE) + TOLERANCE):
        return target
    return _closest_feasible(x, target, share, totals, gpus, weight, cap)


def _closest_feasible(
    x: np.ndarray,
    target: np.ndarray,
    share: np.ndarray,
    totals: np.ndarray,
    gpus: np.ndarray,
    weight: np.ndarray,
    capacity: np.ndarray,
) -> np.ndarray:
    """min sum_rt weight_r (x_rt - target_rt)^2 / share_rt with the totals and capacities held."""
    import scipy.sparse as sp  # lazily: see mm_lp.py

    r, t = np.nonzero((share > 0) & (totals[:, None] > 0))
    n, n_rows, k = len(r), x.shape[0], x.shape[1]
    # Rows: sum_t x_rt = a_r (one per row of x), then sum_r gpus_r x_rt <= cap_t.
    a = sp.csc_matrix(
        (np.concatenate([np.ones(n), gpus[r]]),
         (np.concatenate([r, n_rows + t]), np.concatenate([np.arange(n), np.arange(n)]))),
        shape=(n_rows + k, n),
    )  # fmt: skip
    q = 2.0 * weight[r] / share[r, t]  # objective 1/2 x'Qx + c'x = the distance + const
    lp = highspy.HighsLp()
    lp.num_col_, lp.num_row_ = n, n_rows + k
    lp.col_cost_ = -q * target[r, t]
    lp.col_lower_ = np.zeros(n)
    lp.col_upper_ = np.full(n, highspy.kHighsInf)
    lp.row_lower_ = np.concatenate([totals, np.full(k, -highspy.kHighsInf)])
    lp.row_upper_ = np.concatenate([totals, capacity.astype(np.float64)])
    lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
    lp.a_matrix_.start_ = a.indptr.astype(np.int32)
    lp.a_matrix_.index_ = a.indices.astype(np.int32)
    lp.a_matrix_.value_ = a.data.astype(np.float64)
    hessian = highspy.HighsHessian()
    hessian.dim_ = n
    hessian.format_ = highspy.HessianFormat.kTriangular
    hessian.start_ = np.arange(n + 1, dtype=np.int32)
    hessian.index_ = np.arange(n, dtype=np.int32)
    hessian.value_ = q
    h = new_highs()
    h.passModel(lp)
    h.passHessian(hessian)
    h.run()
    if h.getModelStatus() != highspy.HighsModelStatus.kOptimal:
        return x  # the LP's split: same totals, same objective
    out = np.zeros_like(x)
    out[r, t] = np.clip(np.asarray(h.getSolution().col_value), 0.0, None)
    return out
