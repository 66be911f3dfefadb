"""A thin, exact LP path: sparse matrices straight into HiGHS.

cvxpy's canonicalisation dominates solve time for the large problems a round
sees (10,000 jobs is ~30,000 variables); building scipy sparse matrices and
handing them to HiGHS directly skips it. Policies keep a plain cvxpy
formulation as their reference path for tests; this is the fast path.

    minimise    c @ x
    subject to  row_lower <= A @ x <= row_upper
                col_lower <= x <= col_upper
"""

from __future__ import annotations

from dataclasses import dataclass

import highspy
import numpy as np
import scipy.sparse as sp

from slurm_gavel.errors import SolveError

INF = highspy.kHighsInf


class SolverError(SolveError):
    """The solver did not reach an optimum; the message says what it reported."""


@dataclass
class LpSolution:
    x: np.ndarray
    objective: float
    row_duals: np.ndarray


def solve_lp(
    c: np.ndarray,
    a: sp.spmatrix | sp.sparray,
    row_lower: np.ndarray,
    row_upper: np.ndarray,
    col_lower: np.ndarray,
    col_upper: np.ndarray,
    *,
    maximize: bool = False,
    time_limit: float | None = None,
) -> LpSolution:
    """Solve one LP with HiGHS; raise :class:`SolverError` unless it is optimal."""
    csc = sp.csc_matrix(a)
    n_rows, n_cols = csc.shape
    lp = highspy.HighsLp()
    lp.num_col_ = n_cols
    lp.num_row_ = n_rows
    lp.col_cost_ = np.asarray(c, dtype=np.float64)
    lp.col_lower_ = np.asarray(col_lower, dtype=np.float64)
    lp.col_upper_ = np.asarray(col_upper, dtype=np.float64)
    lp.row_lower_ = np.asarray(row_lower, dtype=np.float64)
    lp.row_upper_ = np.asarray(row_upper, dtype=np.float64)
    lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
    lp.a_matrix_.start_ = csc.indptr.astype(np.int32)
    lp.a_matrix_.index_ = csc.indices.astype(np.int32)
    lp.a_matrix_.value_ = csc.data.astype(np.float64)
    lp.sense_ = highspy.ObjSense.kMaximize if maximize else highspy.ObjSense.kMinimize

    h = highspy.Highs()
    h.setOptionValue("output_flag", False)
    if time_limit is not None:
        h.setOptionValue("time_limit", float(time_limit))
    h.passModel(lp)
    h.run()
    status = h.getModelStatus()
    if status != highspy.HighsModelStatus.kOptimal:
        raise SolverError(f"HiGHS stopped with status '{h.modelStatusToString(status)}'")
    sol = h.getSolution()
    info = h.getInfo()
    return LpSolution(
        x=np.asarray(sol.col_value),
        objective=float(info.objective_function_value),
        row_duals=np.asarray(sol.row_dual),
    )
