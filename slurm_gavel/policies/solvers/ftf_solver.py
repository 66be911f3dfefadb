"""Minimise the largest "stretch" theta with per-job deadlines, exactly, over classes.

Both finish_time_fairness and min_total_duration have the form

    minimise theta  s.t.  rate_j >= w_j(theta) = R_j / (theta * D_j - A_j)  for every job,

with R_j the steps left (makespan: D_j = 1, A_j = 0, theta = makespan; FTF:
theta = rho, D_j = the isolated finish time, A_j = time since start). For fixed
theta the requirements w_j are numbers and ftf_requirements turns "some per-job
allocation meets them" into a small LP over class totals X[c, t]. We solve

    beta(theta) = min beta  s.t.  requirement rows >= psi(theta),
                                  GPUs used on t <= beta * cap_t,

which is convex and decreasing in theta (psi is convex and decreasing), and find
beta(theta) = 1 by safeguarded Newton from the left: the row duals give
d beta / d psi, so d beta / d theta = y . psi'(theta) and each step lands at or
below the root (convexity). Every iterate also yields a feasible allocation
(the LP's X scaled by 1/beta meets w_j(theta) / beta), whose exact stretch is an
upper bound; we stop when the two bounds meet to 1e-10 relative. Each LP is a
warm-started HiGHS re-solve with new row bounds (a few hundred rows for 10,000
jobs), so the whole search costs milliseconds. Finally split_class turns the
class totals into per-job fractions and hand_out_spare gives GPUs the optimum
leaves idle to jobs with time to spare (rates only go up, so the stretch can
only improve). The stretch reported is recomputed from the per-job fractions.

A time limit covers the whole search: the class LP's HiGHS instance counts all its
re-solves against it; the decomposition (ftf_dw.py) shares one Deadline
(deadline.py) over its solves, and the class LP after it stalls gets what is left.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import highspy
import numpy as np
import scipy.sparse as sp

from slurm_gavel.errors import SolveError
from slurm_gavel.policies.solvers.classes import Classes, JobArrays, group
from slurm_gavel.policies.solvers.deadline import Deadline
from slurm_gavel.policies.solvers.dw import DwStalled
from slurm_gavel.policies.solvers.ftf_dw import DwStretch, use_decomposition
from slurm_gavel.policies.solvers.ftf_requirements import (
    RequirementRows,
    requirement_rows,
    split_class,
)
from slurm_gavel.policies.solvers.lp import IPM_COLUMNS, highs_model, run_to_optimum, solve_lp
from slurm_gavel.policies.solvers.solve_paths import decomposed, fell_back

REL_GAP = 1e-10
ROOT_TOL = 1e-12  # beta this close to 1 from below: theta is the root
UNCONVERGED_GAP = 1e-7  # past MAX_STEPS, a bracket wider than this is an error
MAX_STEPS = 200


@dataclass(frozen=True)
class StretchResult:
    x: np.ndarray  # (N, K) per-job fractions
    theta: float  # the stretch the allocation achieves (max over jobs with demand)
    lower_bound: float  # proven lower bound on the optimum
    lp_solves: int


def minimise_stretch_over(
    arrays: JobArrays,
    active: np.ndarray,
    steps: np.ndarray,
    d: np.ndarray,
    a: np.ndarray,
    time_limit: float | None,
) -> tuple[np.ndarray, float]:
    """:func:`minimise_stretch` over the classes of a policy's `active` jobs:
    (x, theta)."""
    res = minimise_stretch(
        arrays.throughput,
        arrays.scale,
        arrays.capacity,
        group(arrays, mask=active),
        steps,
        d,
        a,
        time_limit=time_limit,
    )
    return res.x, res.theta


def minimise_stretch(
    tput: np.ndarray,
    scale: np.ndarray,
    capacity: np.ndarray,
    classes: Classes,
    steps: np.ndarray,
    d: np.ndarray,
    a: np.ndarray,
    *,
    floor: float = 0.0,
    time_limit: float | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> StretchResult:
    """Jobs in `classes` (steps > 0, runnable, d > 0) get rate >= steps / (theta d - a);
    SolverError past `time_limit` seconds (on `clock`, read only with a limit)."""
    n_jobs, n_types = tput.shape
    members = np.concatenate(classes.members) if len(classes) else np.zeros(0, dtype=np.int64)
    if len(members) == 0:
        return StretchResult(np.zeros((n_jobs, n_types)), floor, floor, 0)
    class_tput = tput[classes.first]
    # Each job alone on its fastest type, all the time: theta can be no lower.
    best = tput[members].max(axis=1)
    lo = max(floor, float(np.max((a[members] + steps[members] / best) / d[members])))

    def requirements(theta: float) -> tuple[np.ndarray, np.ndarray]:
        denom = theta * d - a
        w = np.zeros(n_jobs)
        dw = np.zeros(n_jobs)
        w[members] = steps[members] / denom[members]
        dw[members] = -steps[members] * d[members] / denom[members] ** 2
        return w, dw

    def achieved(theta: float, beta: float) -> float:
        # Stretch of the allocation X / beta, which meets w_j(theta) / beta.
        return float(np.max(a[members] / d[members] + beta * (theta - a[members] / d[members])))

    x = np.zeros((n_jobs, n_types))
    if use_decomposition(len(members), len(classes), n_types):
        # (Almost) no classes: one unit per job, by decomposition (ftf_dw.py).
        deadline = Deadline.after(time_limit, "stretch decomposition", clock)
        model_dw = DwStretch(tput[members], scale[members], capacity, deadline)
        try:
            theta_f, beta_f, pool, lo_f, solves = _search(
                lo, requirements, achieved, lambda w, dw: model_dw.solve(w[members], dw[members])
            )
        except DwStalled as e:  # no certified answer: the class LP below, in the time left
            fell_back("stretch", e.reason, str(e))
        else:
            decomposed("stretch")
            x[members] = pool / beta_f
            return _finish(x, tput, scale, capacity, members, steps, d, a, floor, lo_f, solves)
        time_limit = deadline.remaining()
    rows = requirement_rows(class_tput, classes.of_job)
    model = _BetaLp(rows, class_tput, scale[classes.first], capacity, time_limit)
    theta_f, beta_f, pool, lo, solves = _search(
        lo, requirements, achieved, lambda w, dw: model.solve(rows.psi(w), rows.dpsi(w, dw))
    )
    need = requirements(theta_f)[0] / beta_f
    for c, idx in enumerate(classes.members):
        x[idx] = split_class(class_tput[c], pool[c] / beta_f, need[idx])
    return _finish(x, tput, scale, capacity, members, steps, d, a, floor, lo, solves)


def _search(
    lo: float,
    requirements: Callable[[float], tuple[np.ndarray, np.ndarray]],
    achieved: Callable[[float, float], float],
    solve: Callable[[np.ndarray, np.ndarray], tuple[float, np.ndarray, float]],
) -> tuple[float, float, np.ndarray, float, int]:
    """Safeguarded Newton on beta(theta) = 1 (module docstring): (theta, beta, the LP's
    point at them, the proven lower bound, LP solves)."""
    theta = lo
    hi, hi_point = np.inf, None
    solves = 0
    while solves < MAX_STEPS:
        w, dw = requirements(theta)
        beta, pool, slope = solve(w, dw)
        solves += 1
        if beta <= 1.0:
            hi, hi_point = theta, (theta, 1.0, pool)  # feasible as it is
            if beta >= 1.0 - ROOT_TOL or theta == lo:
                lo = theta  # at the root (or at the lower bound): optimal
        else:
            lo = max(lo, theta)
            up = achieved(theta, beta)
            if up < hi:
                hi, hi_point = up, (theta, beta, pool)
        if hi - lo <= REL_GAP * hi:
            break
        nxt = theta + (1.0 - beta) / slope if slope < 0 else np.inf
        if not (lo < nxt < hi) or abs(nxt - theta) <= 0.01 * REL_GAP * hi:
            # Newton stalled (degenerate duals) or left the bracket: bisect instead.
            nxt = 0.5 * (lo + hi) if np.isfinite(hi) else 2.0 * theta
        theta = nxt
    if hi_point is None:
        raise SolveError(
            f"stretch search found no feasible allocation in {solves} LP solves; "
            "this is a bug, please report it with the problem JSON"
        )
    if hi - lo > UNCONVERGED_GAP * hi:
        raise SolveError(
            f"stretch search stopped after {solves} LP solves with the optimum only "
            f"bracketed in [{lo:.9g}, {hi:.9g}]; no allocation returned"
        )
    theta_f, beta_f, pool = hi_point
    return theta_f, beta_f, pool, lo, solves


def _finish(
    x: np.ndarray,
    tput: np.ndarray,
    scale: np.ndarray,
    capacity: np.ndarray,
    members: np.ndarray,
    steps: np.ndarray,
    d: np.ndarray,
    a: np.ndarray,
    floor: float,
    lo: float,
    solves: int,
) -> StretchResult:
    """Idle GPUs handed out; the stretch recomputed from the per-job fractions."""
    x = hand_out_spare(x, tput, scale, capacity, eligible=members)
    rate = (tput * x).sum(axis=1)
    with np.errstate(divide="ignore"):
        stretch = (a[members] + steps[members] / rate[members]) / d[members]
    return StretchResult(x, max(floor, float(stretch.max())), lo, solves)


def hand_out_spare(
    x: np.ndarray, tput: np.ndarray, scale: np.ndarray, capacity: np.ndarray, eligible: np.ndarray
) -> np.ndarray:
    """Give idle GPUs to jobs with time to spare; no job's rate goes down.

    The stretch optimum leaves GPUs idle wherever the bottleneck is elsewhere.
    Type by type (in cluster order), `eligible` jobs (indices; those in the
    objective) that run there and have time left take
    the idle GPUs, those to which the type is relatively best first (T_jt / max
    T_j), each up to its time budget. Afterwards no type has idle GPUs while a
    job that runs there has time left (work conservation); O(N K log N), no LP.
    """
    x = x.copy()
    best = tput.max(axis=1)
    mask = np.zeros(len(scale), dtype=bool)
    mask[eligible] = True
    for t in range(tput.shape[1]):
        spare = capacity[t] - float(scale @ x[:, t])
        if spare <= 1e-9:
            continue
        slack = np.maximum(1.0 - x.sum(axis=1), 0.0)
        ok = np.nonzero(mask & (tput[:, t] > 0) & (slack > 1e-12) & (scale <= capacity[t]))[0]
        if len(ok) == 0:
            continue
        ok = ok[np.argsort(-tput[ok, t] / best[ok], kind="stable")]
        gpus = slack[ok] * scale[ok]  # GPUs each would take with all its spare time
        before = np.concatenate([[0.0], np.cumsum(gpus)[:-1]])
        take = np.clip(spare - before, 0.0, gpus)  # GPUs granted, in order, until none left
        x[ok, t] += take / scale[ok]
    return x


class _BetaLp:
    """min beta s.t. coef X >= psi (per class), sum_c s_c X_ct <= beta cap_t."""

    def __init__(
        self,
        rows: RequirementRows,
        class_tput: np.ndarray,
        gpus_per_unit: np.ndarray,
        capacity: np.ndarray,
        time_limit: float | None,
    ) -> None:
        n_cls, n_types = class_tput.shape
        xc, xt = np.nonzero(class_tput > 0)
        self.xc, self.xt, self.shape = xc, xt, (n_cls, n_types)
        nx = len(xc)
        col_of = np.full((n_cls, n_types), -1, dtype=np.int64)
        col_of[xc, xt] = np.arange(nx)
        # requirement rows: one entry per (row, allowed type with positive coef)
        rr, rt = np.nonzero(rows.coef > 0)
        rr_cols = col_of[rows.row_class[rr], rt]
        keep = rr_cols >= 0
        rr, rt, rr_cols = rr[keep], rt[keep], rr_cols[keep]
        n_req = len(rows.row_class)
        beta = nx
        r = np.concatenate([rr, n_req + xt, n_req + np.arange(n_types)])
        c = np.concatenate([rr_cols, np.arange(nx), np.full(n_types, beta)])
        v = np.concatenate([rows.coef[rr, rt], gpus_per_unit[xc], -capacity])
        a = sp.csc_matrix((v, (r, c)), shape=(n_req + n_types, nx + 1))
        self.n_req, self.nx = n_req, nx
        inf = highspy.kHighsInf
        cost = np.zeros(nx + 1)
        cost[beta] = 1.0
        self.h = highs_model(
            cost,
            a,
            np.concatenate([np.zeros(n_req), np.full(n_types, -inf)]),
            np.concatenate([np.full(n_req, inf), np.zeros(n_types)]),
            time_limit=time_limit,
        )
        self.idx = np.arange(n_req, dtype=np.int32)
        self.upper = np.full(n_req, inf)
        self.cold = nx + 1 > IPM_COLUMNS

    def solve(self, psi: np.ndarray, dpsi: np.ndarray) -> tuple[float, np.ndarray, float]:
        """(beta, pooled X (C, K), d beta / d theta)."""
        h = self.h
        if self.n_req:
            h.changeRowsBounds(  # type: ignore[attr-defined]  # in _Highs, not in highspy's stubs
                self.n_req, self.idx, np.maximum(psi, 0.0), self.upper
            )
        if self.cold:
            h.setOptionValue("solver", "ipm")
        run_to_optimum(h, "stretch LP")
        if self.cold:
            h.setOptionValue("solver", "choose")
            self.cold = False
        sol = h.getSolution()
        col = np.asarray(sol.col_value)
        duals = np.asarray(sol.row_dual)[: self.n_req]
        pool = np.zeros(self.shape)
        pool[self.xc, self.xt] = np.maximum(col[: self.nx], 0.0)
        return float(col[-1]), pool, float(duals @ dpsi)


def solve_lp_sized(
    c: np.ndarray,
    a: sp.csc_matrix,
    row_lower: np.ndarray,
    row_upper: np.ndarray,
    *,
    maximize: bool,
    time_limit: float | None,
    what: str,
) -> np.ndarray:
    """One LP over x >= 0 in HiGHS (IPM + crossover above IPM_COLUMNS columns); x."""
    return solve_lp(
        c,
        a,
        row_lower,
        row_upper,
        maximize=maximize,
        time_limit=time_limit,
        what=what,
        ipm_above=IPM_COLUMNS,
    ).x
