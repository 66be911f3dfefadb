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

The time limit (PolicyOptions.time_limit) is one Deadline (deadline.py) for the whole
solve, started once by water_fill: the parametric path's decomposition solves, the
first level's decomposition (hier_dw) and every run of the two HiGHS LPs here get what
is left of it, so a round never spends more than the limit in all (each used to get
the whole limit of its own). Past it: the deadline's SolverError, never a weaker answer.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import highspy
import numpy as np
import scipy.sparse as sp

from slurm_gavel.errors import SolveError
from slurm_gavel.policies.solvers.deadline import NO_DEADLINE, Deadline
from slurm_gavel.policies.solvers.hier_dw import first_level as first_level_dw
from slurm_gavel.policies.solvers.hier_parametric import MARGIN, MARGIN_FLOOR, parametric_fill
from slurm_gavel.policies.solvers.lp import IPM_COLUMNS, highs_model
from slurm_gavel.policies.solvers.solve_paths import fell_back

#: A dual times the job's margin above this (times the level, at least 1) proves it.
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
    # (C,) the level each class froze at: the water filling's answer. value may exceed
    # it where the last LP's vertex (or the path's last fractions) leaves a job spare
    # capacity no level needs; which job gets that is the solver's choice.
    level: np.ndarray


def water_fill(
    cls: HierClasses,
    *,
    time_limit: float | None = None,
    max_iterations: int | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> WaterFillingResult:
    """The water filling within `time_limit` seconds in all (on `clock`, read only with
    a limit); past it a SolverError (module docstring)."""
    deadline = Deadline.after(time_limit, "hierarchical water filling", clock)
    n_cls, n_types = cls.coef.shape
    runnable = cls.coef.max(axis=1, initial=0.0) > 0
    frozen = ~runnable  # classes that cannot run stay at 0
    level = np.zeros(n_cls)
    x = np.zeros((n_cls, n_types))
    first_level = 0.0
    limit = max_iterations if max_iterations is not None else n_cls + 1
    iterations = 0
    # Per-job rows: the levels where only time rows bind need no LP (hier_parametric).
    par = parametric_fill(
        cls.coef, cls.scale, cls.count, cls.weight, cls.entity, cls.entity_weight, cls.capacity,
        deadline=deadline,
    )  # fmt: skip
    if par is not None:
        if par.complete:
            value = (cls.coef * par.x).sum(axis=1)
            return WaterFillingResult(par.x, value, par.first_level, par.iterations, par.level)
        try:  # the LP loop goes on from the parametric path's state
            return _lp_loop(
                cls,
                par.frozen,
                par.level,
                par.x,
                par.first_level,
                par.iterations,
                limit,
                deadline,
            )
        except WaterFillingError:
            # A handed-over state the level LPs cannot continue (seen once at 10,000
            # jobs on a cluster with a plentiful type): start the exact loop afresh,
            # slower but never without an allocation.
            fell_back(
                "hier_path", "handover_failed",
                "parametric hand-over failed: the level LPs cannot continue from the path's "
                "state; the exact loop from the start",
            )  # fmt: skip
    return _lp_loop(cls, frozen, level, x, first_level, iterations, limit, deadline)


def _lp_loop(
    cls: HierClasses,
    frozen: np.ndarray,
    level: np.ndarray,
    x: np.ndarray,
    first_level: float,
    iterations: int,
    limit: int,
    deadline: Deadline,
) -> WaterFillingResult:
    """Gavel's water filling, one LP level at a time, from the given state; every HiGHS
    run within `deadline`."""
    # Two LPs, built once and re-solved warm: only bounds and one column's (or the
    # diagonal's) coefficients change between iterations.
    level_lp = _ClassLp(cls, one_column=True, deadline=deadline)
    lift_lp = _ClassLp(cls, one_column=False, deadline=deadline)
    while not frozen.all():
        if iterations >= limit:
            raise WaterFillingError(
                f"hierarchical water filling did not finish in {limit} iterations "
                f"({int((~frozen).sum())} job classes still unfrozen); no allocation returned"
            )
        iterations += 1
        share = effective_weights(cls, frozen)
        rise = np.where(frozen, 0.0, share / cls.scale)
        quick = None
        if iterations == 1:  # everyone at 0: the decomposition's case (hier_dw.py)
            quick = first_level_dw(
                cls.coef, cls.count * cls.scale, cls.capacity, rise, ~frozen, _margin, deadline
            )
        if quick is not None:
            c_star, x, duals = quick
        else:
            sol, duals = level_lp.solve(level, rise, "level")
            c_star = float(sol[-1])
            x = level_lp.fractions(sol)
        if iterations == 1:
            first_level = c_star
        level = level + c_star * rise
        # A dual proves a job bottlenecked only where lifting it by its margin would
        # cost the level more than the solver's rounding (the dual bound: c falls by
        # |y_j| times the lift). At a degenerate vertex HiGHS returned duals of 1e-9 on
        # rows that were no bottleneck, and "proven" by them, jobs that could still rise
        # by 12 % were frozen (1,000 jobs with a plentiful type). The rest go to the
        # bottleneck LP, which decides by lifting.
        proof = np.abs(duals) * _margin(level)
        sure = ~frozen & (proof > DUAL_TOL * max(1.0, abs(c_star)))
        stuck = sure | find_bottlenecked(lift_lp, level, ~frozen & ~sure)
        if not stuck.any():
            raise WaterFillingError(
                "hierarchical water filling made no progress: no job is bottlenecked at "
                f"level {c_star:.6g} (iteration {iterations}); no allocation returned"
            )
        frozen = frozen | stuck
    value = (cls.coef * x).sum(axis=1)
    return WaterFillingResult(x, value, first_level, iterations, level)


def effective_weights(cls: HierClasses, frozen: np.ndarray) -> np.ndarray:
    """(C,) w'_j per job: the entity's weight split over its unfrozen jobs by job weight."""
    live = np.where(frozen, 0.0, cls.weight * cls.count)
    total = np.bincount(cls.entity, weights=live, minlength=len(cls.entity_weight))
    denom = total[cls.entity]
    with np.errstate(divide="ignore", invalid="ignore"):
        w = np.where(frozen | (denom <= 0), 0.0, cls.entity_weight[cls.entity] * cls.weight / denom)
    return w


def _margin(level: np.ndarray) -> np.ndarray:
    """The lift that counts as "not bottlenecked" at these levels."""
    return np.maximum(MARGIN * level, MARGIN_FLOOR)


def find_bottlenecked(lift_lp: _ClassLp, level: np.ndarray, candidates: np.ndarray) -> np.ndarray:
    """(C,) candidates that no allocation can lift above their level (others held)."""
    cand = candidates.copy()
    margin = _margin(level)
    while cand.any():
        try:
            sol, _ = lift_lp.solve(level, np.where(cand, margin, 0.0), "bottleneck")
        except WaterFillingError:
            # The levels just reached sit on the level LP's boundary, and HiGHS can
            # call them infeasible by its own rounding: ask again a hair below them
            # (1e-9 relative, far below the margin), once.
            below = level * (1.0 - 1e-9) - 1e-12
            sol, _ = lift_lp.solve(below, np.where(cand, margin, 0.0), "bottleneck")
        e = np.where(cand, sol[lift_lp.nx :], 0.0)
        if e.sum() < 0.5:
            break  # no remaining candidate can rise by its margin: all are bottlenecked
        # e_k > 0.05 is a lift far above the solver's tolerance (margin >= 100x it).
        lifted = e > 0.05
        if not lifted.any():
            raise WaterFillingError(
                "hierarchical water filling: the bottleneck LP lifted jobs by amounts too "
                "small to tell apart from solver noise; no allocation returned"
            )
        cand &= ~lifted
    return cand


class _ClassLp:
    """Rows: value_k - g_k(extra) >= level_k, time_k <= 1, GPUs_t <= cap_t; maximise extras.

    one_column: a single extra column c with coefficient -rise_k in row k (level LP).
    Otherwise one extra column e_k per class in [0, 1] (0 when not a candidate) with
    coefficient -margin_k in row k (bottleneck LP). Columns: x (nx), then the extras.
    """

    def __init__(self, cls: HierClasses, *, one_column: bool, deadline: Deadline) -> None:
        n_cls, n_types = cls.coef.shape
        xc, xt = np.nonzero(cls.coef > 0)
        nx = len(xc)
        self.xc, self.xt, self.nx, self.shape = xc, xt, nx, (n_cls, n_types)
        self.one_column = one_column
        n_extra = 1 if one_column else n_cls
        n_col = nx + n_extra
        self.extra_col = np.full(n_cls, nx) if one_column else nx + np.arange(n_cls)
        rows = np.concatenate([xc, n_cls + xc, 2 * n_cls + xt, np.arange(n_cls)])
        cols = np.concatenate([np.arange(nx)] * 3 + [self.extra_col])
        vals = np.concatenate(
            [cls.coef[xc, xt], np.ones(nx), cls.count[xc] * cls.scale[xc], -np.ones(n_cls)]
        )
        a = sp.csc_matrix((vals, (rows, cols)), shape=(2 * n_cls + n_types, n_col))
        inf = highspy.kHighsInf
        self.h = highs_model(
            np.concatenate([np.zeros(nx), np.ones(n_extra)]),
            a,
            np.concatenate([np.zeros(n_cls), np.full(n_cls + n_types, -inf)]),
            np.concatenate([np.full(n_cls, inf), np.ones(n_cls), cls.capacity]),
            np.zeros(n_col),
            np.full(n_col, inf if one_column else 1.0),
            maximize=True,
        )
        self.deadline = deadline  # each run gets what is left of it (_run)
        self.rows = np.arange(n_cls, dtype=np.int32)
        self.inf_rows = np.full(n_cls, inf)
        self.cold = n_col > IPM_COLUMNS

    def solve(
        self, level: np.ndarray, gain: np.ndarray, what: str
    ) -> tuple[np.ndarray, np.ndarray]:
        """Solve with row lower bounds `level` and extra coefficients -gain: (columns, duals)."""
        h = self.h
        h.changeRowsBounds(  # type: ignore[attr-defined]  # in _Highs, not in highspy's stubs
            len(self.rows), self.rows, level, self.inf_rows
        )
        for k, (col, g) in enumerate(zip(self.extra_col.tolist(), gain.tolist(), strict=True)):
            h.changeCoeff(k, col, -g)
        if not self.one_column:
            n = len(self.rows)
            cols = self.extra_col.astype(np.int32)
            h.changeColsBounds(n, cols, np.zeros(n), np.where(gain > 0, 1.0, 0.0))
        if self.cold:  # large and degenerate: IPM + crossover, then warm simplex
            h.setOptionValue("solver", "ipm")
        _run(h, what, self.deadline)
        if self.cold:
            h.setOptionValue("solver", "choose")
            self.cold = False
        sol = h.getSolution()
        duals = np.asarray(sol.row_dual)[: len(self.rows)]
        return np.asarray(sol.col_value), duals

    def fractions(self, sol: np.ndarray) -> np.ndarray:
        x = np.zeros(self.shape)
        x[self.xc, self.xt] = np.clip(sol[: self.nx], 0.0, 1.0)
        return x


def _run(h: highspy.Highs, what: str, deadline: Deadline = NO_DEADLINE) -> None:
    """Run `h` within what is left of `deadline` (its SolverError past it); a
    WaterFillingError unless optimal."""
    status = deadline.run(h)
    if status != highspy.HighsModelStatus.kOptimal:
        raise WaterFillingError(
            f"hierarchical water filling: {what} LP failed (HiGHS status "
            f"'{h.modelStatusToString(status)}'); no allocation returned"
        )
