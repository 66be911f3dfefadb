"""Weighted max-min water filling across and inside entities, exactly, with HiGHS LPs only.

This is Gavel's WaterFillingAlgorithm with the 'fairness' reweighting (its
hierarchical policy), over classes of jobs that are identical for every LP here
(same row, scale factor, priority weight and entity: swapping two of them is a
symmetry of each LP, so some optimum treats them alike, and they are
bottlenecked together).

Per job: value_j = sum_t T_jt x_jt / P_j (normalised throughput). Each iteration:

1. Weights: an unfrozen job of entity e gets w'_j = W_e * w_j / (sum of w over
   the entity's unfrozen jobs); frozen jobs give their share back.
2. Level LP: maximise c s.t. value_j >= so_far_j + c * w'_j / s_j (unfrozen),
   value_j >= final_j (frozen), the base constraints; then so_far_j += c* w'_j / s_j.
3. Bottlenecks: an unfrozen job is bottlenecked when no allocation keeps every
   job at its level and lifts it (by more than a 1e-4 relative margin, well above
   the solver's tolerances). Positive duals of the level LP prove bottlenecks
   outright; for the rest one LP maximises sum_k e_k with value_k >= level_k +
   margin_k e_k, 0 <= e_k <= 1: any candidate with e_k > 0 has a witness and is
   not bottlenecked, and once the LP's optimum is 0 no remaining candidate can
   rise, so all of them are bottlenecked (repeat in between). Gavel finds the
   same set with a MILP and, without a MILP solver, silently degrades to plain
   max-min; this never degrades: every failure raises WaterFillingError.
4. Freeze the bottlenecked jobs at their level; stop when all are frozen.
"""

from __future__ import annotations

from dataclasses import dataclass

import highspy
import numpy as np
import scipy.sparse as sp

from slurm_gavel.errors import SolveError
from slurm_gavel.policies.lp import LpSolution, SolverError, solve_lp

MARGIN = 1e-4  # relative lift that counts as "not bottlenecked"
MARGIN_FLOOR = 1e-5  # ... and never less than this (normalised units: 1 = a fair share)
DUAL_TOL = 1e-9


class WaterFillingError(SolveError):
    """The water filling could not complete; never replaced by a weaker answer."""


@dataclass(frozen=True)
class HierClasses:
    coef: np.ndarray  # (C, K) T / P per unit of time, 0 where the class may not run
    scale: np.ndarray  # (C,) GPUs per job
    count: np.ndarray  # (C,) jobs in the class
    weight: np.ndarray  # (C,) priority weight of each job
    entity: np.ndarray  # (C,) entity index
    entity_weight: np.ndarray  # (E,)
    capacity: np.ndarray  # (K,)


@dataclass(frozen=True)
class WaterFillingResult:
    x: np.ndarray  # (C, K) per-job fractions of each class
    value: np.ndarray  # (C,) normalised throughput per job
    first_level: float  # c* of the first iteration (the weighted max-min level)
    iterations: int


def water_fill(
    cls: HierClasses, *, time_limit: float | None = None, max_iterations: int | None = None
) -> WaterFillingResult:
    n_cls, n_types = cls.coef.shape
    runnable = cls.coef.max(axis=1, initial=0.0) > 0
    frozen = ~runnable  # classes that cannot run stay at 0
    level = np.zeros(n_cls)
    x = np.zeros((n_cls, n_types))
    first_level = 0.0
    limit = max_iterations if max_iterations is not None else n_cls + 1
    iterations = 0
    while not frozen.all():
        if iterations >= limit:
            raise WaterFillingError(
                f"hierarchical water filling did not finish in {limit} iterations "
                f"({int((~frozen).sum())} job classes still unfrozen); no allocation returned"
            )
        iterations += 1
        share = effective_weights(cls, frozen)
        rise = np.where(frozen, 0.0, share / cls.scale)
        c_star, x, duals = level_lp(cls, level, rise, time_limit)
        if iterations == 1:
            first_level = c_star
        level = level + c_star * rise
        sure = ~frozen & (np.abs(duals) > DUAL_TOL)
        stuck = sure | find_bottlenecked(cls, level, ~frozen & ~sure, time_limit)
        if not stuck.any():
            raise WaterFillingError(
                "hierarchical water filling made no progress: no job is bottlenecked at "
                f"level {c_star:.6g} (iteration {iterations}); no allocation returned"
            )
        frozen = frozen | stuck
    value = (cls.coef * x).sum(axis=1)
    return WaterFillingResult(x, value, first_level, iterations)


def effective_weights(cls: HierClasses, frozen: np.ndarray) -> np.ndarray:
    """(C,) w'_j per job: the entity's weight split over its unfrozen jobs by job weight."""
    live = np.where(frozen, 0.0, cls.weight * cls.count)
    total = np.bincount(cls.entity, weights=live, minlength=len(cls.entity_weight))
    denom = total[cls.entity]
    with np.errstate(divide="ignore", invalid="ignore"):
        w = np.where(frozen | (denom <= 0), 0.0, cls.entity_weight[cls.entity] * cls.weight / denom)
    return w


Blocks = tuple[list[np.ndarray], list[np.ndarray], list[np.ndarray], tuple[np.ndarray, np.ndarray]]


def _base_blocks(cls: HierClasses, first_row: int) -> Blocks:
    """COO pieces (rows, cols, values) of the value, time and capacity rows over x."""
    n_cls = cls.coef.shape[0]
    xc, xt = np.nonzero(cls.coef > 0)
    nx = len(xc)
    b_time = first_row + n_cls
    b_cap = b_time + n_cls
    rows = [first_row + xc, b_time + xc, b_cap + xt]
    cols = [np.arange(nx)] * 3
    vals = [cls.coef[xc, xt], np.ones(nx), cls.count[xc] * cls.scale[xc]]
    return rows, cols, vals, (xc, xt)


def level_lp(
    cls: HierClasses, level: np.ndarray, rise: np.ndarray, time_limit: float | None
) -> tuple[float, np.ndarray, np.ndarray]:
    """max c s.t. value_k - rise_k c >= level_k, base constraints. (c*, x, value-row duals)."""
    n_cls = cls.coef.shape[0]
    rows, cols, vals, (xc, xt) = _base_blocks(cls, 0)
    nx = len(xc)
    live = np.nonzero(rise > 0)[0]
    rows.append(live)
    cols.append(np.full(len(live), nx))
    vals.append(-rise[live])
    sol, x = _solve(cls, rows, cols, vals, nx + 1, level, (xc, xt), nx, time_limit, "level")
    return float(sol.x[nx]), x, sol.row_duals[:n_cls]


def find_bottlenecked(
    cls: HierClasses, level: np.ndarray, candidates: np.ndarray, time_limit: float | None
) -> np.ndarray:
    """(C,) candidates that no allocation can lift above their level (others held)."""
    cand = candidates.copy()
    rows0, cols0, vals0, (xc, xt) = _base_blocks(cls, 0)
    nx = len(xc)
    margin = np.maximum(MARGIN * level, MARGIN_FLOOR)
    while cand.any():
        idx = np.nonzero(cand)[0]
        rows = [*rows0, idx]
        cols = [*cols0, nx + np.arange(len(idx))]
        vals = [*vals0, -margin[idx]]
        n_col = nx + len(idx)
        cost = np.zeros(n_col)
        cost[nx:] = 1.0
        upper = np.full(n_col, highspy.kHighsInf)
        upper[nx:] = 1.0
        sol, _ = _solve(
            cls, rows, cols, vals, n_col, level, (xc, xt), nx, time_limit, "bottleneck",
            cost=cost, col_upper=upper,
        )  # fmt: skip
        e = sol.x[nx:]
        if e.sum() < 0.5:
            break  # no remaining candidate can rise by its margin: all are bottlenecked
        # e_k > 0.05 is a lift far above the solver's tolerance (margin >= 100x it).
        lifted = e > 0.05
        if not lifted.any():
            raise WaterFillingError(
                "hierarchical water filling: the bottleneck LP lifted jobs by amounts too "
                "small to tell apart from solver noise; no allocation returned"
            )
        cand[idx[lifted]] = False
    return cand


def _solve(
    cls: HierClasses,
    rows: list[np.ndarray],
    cols: list[np.ndarray],
    vals: list[np.ndarray],
    n_col: int,
    level: np.ndarray,
    xcoords: tuple[np.ndarray, np.ndarray],
    nx: int,
    time_limit: float | None,
    what: str,
    *,
    cost: np.ndarray | None = None,
    col_upper: np.ndarray | None = None,
) -> tuple[LpSolution, np.ndarray]:
    n_cls, n_types = cls.coef.shape
    n_row = 2 * n_cls + n_types
    a = sp.csc_matrix(
        (np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))),
        shape=(n_row, n_col),
    )
    inf = highspy.kHighsInf
    lower = np.concatenate([level, np.full(n_cls + n_types, -inf)])
    upper = np.concatenate([np.full(n_cls, inf), np.ones(n_cls), cls.capacity])
    if cost is None:
        cost = np.zeros(n_col)
        cost[nx] = 1.0
    if col_upper is None:
        col_upper = np.full(n_col, inf)
    try:
        sol = solve_lp(
            cost, a, lower, upper, np.zeros(n_col), col_upper, maximize=True, time_limit=time_limit
        )
    except SolverError as e:
        raise WaterFillingError(
            f"hierarchical water filling: {what} LP failed ({e}); no allocation returned"
        ) from e
    x = np.zeros((n_cls, n_types))
    xc, xt = xcoords
    x[xc, xt] = np.clip(sol.x[:nx], 0.0, 1.0)
    return sol, x
