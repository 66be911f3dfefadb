"""The class max-min LP without pair columns, handed to HiGHS with no scipy in between.

This is mm_lp.solve_max_min_classes's LP for the common case (no space sharing,
simplex, a few dozen classes), which the simulator re-solves at almost every
arrival and completion: there the LP itself takes ~0.5 ms and building it
through scipy.sparse, PricedLp and highspy's Python wrapper took as long again.
Here the column-wise matrix is written directly: every x[c, t] column has
exactly three entries, in rows (fairness row of c) < (time row of c) <
(capacity row of t), which is the canonical CSC form scipy produced, and z's
column is the fairness block. HiGHS receives the same arrays, bounds, costs,
options and modification calls in the same order as on the general path, so it
returns the same vertex bit for bit (tests/policies/test_mm_lp_single.py
compares both paths on random class LPs).
"""

from __future__ import annotations

import threading
from typing import Any

import highspy
import numpy as np

from slurm_gavel.policies.solvers.lp import SolverError, run_small_lp, use_small_lp_options
from slurm_gavel.policies.solvers.silent_highs import silence

INF = highspy.kHighsInf

_local = threading.local()


def _highs() -> Any:  # highspy._Highs, which highspy's stubs do not declare
    """One HiGHS instance per thread, reused: passModel() replaces the model and clears
    the basis, solution and info of the previous one, and constructing an instance
    (hundreds of option records, plus highspy's Python callback table) cost as much
    as a small solve. Options this module sets are set again on every use."""
    h = getattr(_local, "h", None)
    if h is None:
        h = silence(highspy._Highs())  # type: ignore[attr-defined]
        _local.h = h
    return h


def solve_single_classes(
    coef: np.ndarray,
    allowed: np.ndarray,
    scale: np.ndarray,
    count: np.ndarray,
    capacity: np.ndarray,
    *,
    second_stage: bool,
    time_limit: float | None,
    slack: float,
    fast: bool = True,
) -> tuple[np.ndarray, np.ndarray]:
    """(x (C, K), runnable (C,)) of the two-stage class max-min LP without pairs.

    The caller has checked that at least one class is runnable and that simplex
    is the solver (few columns); see mm_lp.solve_max_min_classes. ``fast``: HiGHS
    under lp.SMALL_LP_OPTIONS, else under its defaults (mm_lp.flat_rows says when).
    """
    n_cls, n_types = coef.shape
    xc, xt = np.nonzero(allowed)
    nx = len(xc)
    runnable = np.zeros(n_cls, dtype=bool)
    runnable[xc] = True
    fair_rows = np.cumsum(runnable) - 1
    n_fair = int(fair_rows[-1]) + 1
    b2, b3 = n_fair, n_fair + n_cls
    n_rows = b3 + n_types
    n_cols = nx + 1
    nnz = 3 * nx + n_fair

    index = np.empty(nnz, dtype=np.int32)
    cols3 = index[: 3 * nx].reshape(nx, 3)
    cols3[:, 0] = fair_rows[xc]
    cols3[:, 1] = b2 + xc
    cols3[:, 2] = b3 + xt
    index[3 * nx :] = np.arange(n_fair)
    value = np.empty(nnz, dtype=np.float64)
    vals3 = value[: 3 * nx].reshape(nx, 3)
    coef_x = coef[xc, xt]
    vals3[:, 0] = -coef_x
    vals3[:, 1] = 1.0
    vals3[:, 2] = count[xc] * scale[xc]
    value[3 * nx :] = 1.0
    start = np.empty(n_cols + 1, dtype=np.int32)
    start[: nx + 1] = np.arange(0, 3 * nx + 1, 3)
    start[nx + 1] = nnz

    lp = highspy.HighsLp()
    lp.num_col_ = n_cols
    lp.num_row_ = n_rows
    cost = np.zeros(n_cols)
    cost[nx] = 1.0
    lp.col_cost_ = cost
    lp.col_lower_ = np.zeros(n_cols)
    lp.col_upper_ = np.full(n_cols, INF)
    lp.row_lower_ = np.full(n_rows, -INF)
    row_upper = np.empty(n_rows)
    row_upper[:b2] = 0.0
    row_upper[b2:b3] = 1.0
    row_upper[b3:] = capacity
    lp.row_upper_ = row_upper
    lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
    lp.a_matrix_.start_ = start
    lp.a_matrix_.index_ = index
    lp.a_matrix_.value_ = value
    lp.sense_ = highspy.ObjSense.kMaximize
    h = _highs()
    # HiGHS's limit counts every run of the instance, and this one is reused: the limit
    # is this solve's share on top of what earlier solves spent.
    h.setOptionValue("time_limit", INF if time_limit is None else h.getRunTime() + time_limit)
    h.passModel(lp)
    h.setOptionValue("solver", "simplex")
    use_small_lp_options(h, fast=fast)
    run_small_lp(h, "max-min stage 1")
    sol = np.asarray(h.getSolution().col_value)

    if second_stage:
        z_star = float(sol[nx])
        stage2 = np.zeros(n_cols)
        stage2[:nx] = count[xc] * coef_x
        h.changeColBounds(nx, max(z_star * (1 - slack), 0.0), float(INF))
        h.changeColsCost(n_cols, np.arange(n_cols, dtype=np.int32), stage2)
        # On failure keep stage 1's optimum: stage 2 is an improvement, never a requirement.
        try:
            run_small_lp(h, "max-min stage 2")
            sol = np.asarray(h.getSolution().col_value)
        except SolverError:
            pass

    x = np.zeros((n_cls, n_types))
    x[xc, xt] = np.clip(sol[:nx], 0.0, 1.0)
    return x, runnable
