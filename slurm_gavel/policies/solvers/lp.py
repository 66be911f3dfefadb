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

import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import highspy
import numpy as np

from slurm_gavel.errors import SolveError
from slurm_gavel.policies.solvers.silent_highs import new_highs

if TYPE_CHECKING:  # imported where a matrix is converted: see mm_lp.py
    import scipy.sparse as sp

INF = highspy.kHighsInf


class SolverError(SolveError):
    """The solver did not reach an optimum; the message says what it reported."""


@dataclass
class LpSolution:
    x: np.ndarray
    objective: float
    row_duals: np.ndarray


#: Above this many columns, a cold solve uses HiGHS's interior point method with
#: crossover (so later solves still warm-start the simplex): the max-min and
#: stretch LPs are very degenerate; at 10,000 distinct jobs the first stretch LP
#: takes ~11 s by dual simplex and ~3 s by IPM.
IPM_COLUMNS = 6000


#: HiGHS options for the small class max-min LP (no pair columns, simplex), which the
#: simulator re-solves at nearly every arrival and completion: primal simplex, no
#: presolve. x = 0 with z = 0 is feasible, so the primal simplex starts from a
#: feasible slack basis, and stage 2 (a new cost, z's bound raised to the stage-1
#: optimum) keeps the stage-1 vertex feasible; the dual simplex HiGHS picks by default
#: first repairs dual feasibility through many degenerate pivots, and presolve costs
#: more than it removes at a few dozen rows. Measured on the 1,749 LPs of the 1,000-job
#: own-row trace (benchmarks/README.md, "the simulator targets"): 0.82 ms a re-solve
#: against 1.93 ms, the same optima (min and total within the 1e-9 stage-2 slack) at
#: other points of degenerate optimal faces; the answer is still a function of the LP.
SMALL_LP_OPTIONS: dict[str, str | int] = {"presolve": "off", "simplex_strategy": 4}


def use_small_lp_options(h: highspy.Highs, *, fast: bool = True) -> None:
    """Set :data:`SMALL_LP_OPTIONS` on `h` (before its first run); with ``fast=False``
    HiGHS's own defaults for those options instead (a reused instance may hold them)."""
    options = SMALL_LP_OPTIONS if fast else _highs_defaults(tuple(SMALL_LP_OPTIONS))
    for name, value in options.items():
        h.setOptionValue(name, value)


@functools.cache
def _highs_defaults(names: tuple[str, ...]) -> dict[str, Any]:
    """HiGHS's defaults for these options, read once from a fresh instance (flat LPs
    ask on every solve, and an instance costs as much as a small solve to make)."""
    fresh = new_highs()
    out: dict[str, Any] = {}
    for name in names:
        value = fresh.getOptionValue(name)
        # highspy's instance methods give (status, value) in some releases
        out[name] = value[1] if isinstance(value, tuple) else value
    return out


def run_small_lp(h: highspy.Highs, what: str) -> None:
    """:func:`run_to_optimum` under :data:`SMALL_LP_OPTIONS`; where that run ends short
    of an optimum for any reason but the time limit, once more from scratch with
    HiGHS's defaults for those options, so a choice made for speed never fails a round
    that the default solver would have solved."""
    try:
        run_to_optimum(h, what)
    except SolverError:
        if h.getModelStatus() == highspy.HighsModelStatus.kTimeLimit:
            raise
        use_small_lp_options(h, fast=False)
        h.clearSolver()
        run_to_optimum(h, what)


def highs_model(
    c: np.ndarray,
    a: sp.spmatrix | sp.sparray,
    row_lower: np.ndarray,
    row_upper: np.ndarray,
    col_lower: np.ndarray | None = None,
    col_upper: np.ndarray | None = None,
    *,
    maximize: bool = False,
    time_limit: float | None = None,
) -> highspy.Highs:
    """A silent HiGHS instance holding the LP (columns default to x >= 0).

    Policies that re-solve with changed bounds or costs (warm starts) keep the
    instance; one-shot solves go through :func:`solve_lp`.
    """
    import scipy.sparse as sp  # lazily: see mm_lp.py

    csc = sp.csc_matrix(a)
    n_rows, n_cols = csc.shape
    lp = highspy.HighsLp()
    lp.num_col_ = n_cols
    lp.num_row_ = n_rows
    lp.col_cost_ = np.asarray(c, dtype=np.float64)
    lp.col_lower_ = np.zeros(n_cols) if col_lower is None else np.asarray(col_lower, np.float64)
    lp.col_upper_ = np.full(n_cols, INF) if col_upper is None else np.asarray(col_upper, np.float64)
    lp.row_lower_ = np.asarray(row_lower, dtype=np.float64)
    lp.row_upper_ = np.asarray(row_upper, dtype=np.float64)
    lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
    lp.a_matrix_.start_ = csc.indptr.astype(np.int32)
    lp.a_matrix_.index_ = csc.indices.astype(np.int32)
    lp.a_matrix_.value_ = csc.data.astype(np.float64)
    lp.sense_ = highspy.ObjSense.kMaximize if maximize else highspy.ObjSense.kMinimize
    h = new_highs()
    if time_limit is not None:
        h.setOptionValue("time_limit", float(time_limit))
    h.passModel(lp)
    return h


def run_to_optimum(h: highspy.Highs, what: str) -> None:
    """Run HiGHS; raise :class:`SolverError` naming `what` unless it is optimal."""
    h.run()
    status = h.getModelStatus()
    if status != highspy.HighsModelStatus.kOptimal:
        raise SolverError(f"{what}: HiGHS stopped with status '{h.modelStatusToString(status)}'")


def solve_lp(
    c: np.ndarray,
    a: sp.spmatrix | sp.sparray,
    row_lower: np.ndarray,
    row_upper: np.ndarray,
    col_lower: np.ndarray | None = None,
    col_upper: np.ndarray | None = None,
    *,
    maximize: bool = False,
    time_limit: float | None = None,
    what: str = "LP",
    ipm_above: int | None = None,
) -> LpSolution:
    """Solve one LP with HiGHS; raise :class:`SolverError` unless it is optimal.

    ``ipm_above``: use interior point + crossover when there are more columns.
    """
    h = highs_model(
        c,
        a,
        row_lower,
        row_upper,
        col_lower,
        col_upper,
        maximize=maximize,
        time_limit=time_limit,
    )
    if ipm_above is not None and a.shape[1] > ipm_above:
        h.setOptionValue("solver", "ipm")
    run_to_optimum(h, what)
    sol = h.getSolution()
    info = h.getInfo()
    return LpSolution(
        x=np.asarray(sol.col_value),
        objective=float(info.objective_function_value),
        row_duals=np.asarray(sol.row_dual),
    )
