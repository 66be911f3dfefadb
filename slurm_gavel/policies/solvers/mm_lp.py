"""The fast exact path of the max-min family: one LP over job classes, built as sparse arrays.

Variables (per job of a class, except pair variables, which are class totals):

* x[c, t]   fraction of time each job of class c runs alone on type t
* Y[p]      total time the jobs of class pair p = (c, d, t) spend paired on type t
            (a job of c gets Y/n_c of it; within one class, c == d, 2Y/n_c)
* z         the minimum normalised throughput

Stage 1 maximises z. Stage 2 fixes z >= z* (1 - 1e-9) and maximises the total
normalised throughput sum_j value_j: any optimum of stage 1 may leave GPUs idle
that no job's minimum needs (Gavel's LP stops at whichever optimal vertex the
solver lands on); stage 2 hands that capacity out. It never lowers the max-min
objective by more than the 1e-9 relative slack, and on the class LP it costs one
warm-started re-solve.

With more than PRICING_MIN_PAIRS pair columns, they enter the LP by pricing
(mm_pricing.py: column generation, same optimum); large LPs start with HiGHS's
interior point method (IPM_MIN_COLUMNS).

A time limit covers the whole solve: the decomposition's HiGHS runs share one
Deadline (deadline.py), and a plain LP after a stalled decomposition gets what is
left of it. As on the plain path, stage 1 past the limit raises SolverError and
stage 2 past it keeps stage 1's optimum.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import highspy
import numpy as np

from slurm_gavel.policies.solvers.deadline import Deadline
from slurm_gavel.policies.solvers.dw import DW_MAX_TYPES, DwStalled, max_min, max_value, vertices
from slurm_gavel.policies.solvers.lp import SolverError, solve_lp, use_small_lp_options
from slurm_gavel.policies.solvers.mm_lp_single import solve_single_classes
from slurm_gavel.policies.solvers.mm_pricing import PricedLp
from slurm_gavel.policies.solvers.solve_paths import decomposed, fell_back

# scipy.sparse is imported inside the functions that build a matrix: the simulator's
# common path (mm_lp_single) never needs it, and importing it costs ~0.2 s a process.

STAGE2_SLACK = 1e-9
# Above this many columns stage 1 runs HiGHS's interior point method (with crossover,
# so the answer is still a vertex): the max-min LP is highly degenerate and dual
# simplex slows down badly once classes stop compressing the jobs (10,000 distinct
# jobs: ~21 s simplex vs ~4 s IPM on the 2-core dev machine; 2,000: 0.9 vs 0.4 s).
IPM_MIN_COLUMNS = 6000
# Above this many pair columns they enter by pricing (column generation); below it
# one LP with every column is as fast.
PRICING_MIN_PAIRS = 500
# From this many x columns on (and without pairs) both stages are solved by
# decomposition (dw.py): 10,000 distinct jobs ~0.35 s instead of ~2.4 s (stage 1
# alone ~0.15 s instead of ~1.1 s); 1,000 jobs 0.29-0.30 s vs 0.38-0.43, 300 jobs
# 0.11-0.12 vs 0.06-0.09 (loaded machine, one process). Below it HiGHS's vertex.
# 1,200, not the first 3,000: timed on the same LPs both ways (medians, ms, HiGHS /
# decomposition), the simulator's re-solves at 10,000 jobs on 2,048 GPUs 600-1,000
# columns 8.0 / 6.0, 1,000-1,500 14.9 / 7.3, 2,000-3,000 124 / 11; on a loaded
# 300-GPU cluster 600-1,000 20.8 / 8.9, 1,000-1,500 21.1 / 18.9; bench_allocate.py
# (n/4 GPUs per type) 300 jobs 9.9 / 16.7, 400 15.1 / 20.9, 500 21.8 / 19.6, 600
# 28.9 / 21.1. The class LPs of benchmarks/summaries.sh and of the Philly and
# Alibaba windows stay far below it (<= 111 columns): their results are unchanged
# bit for bit (benchmarks/README.md, "Per-job rows").
DW_MIN_COLUMNS = 1200
# The same for max_sum_throughput (its LP is easy for simplex; measured at 10,000).
SUM_DW_MIN_COLUMNS = IPM_MIN_COLUMNS


@dataclass(frozen=True)
class PairVars:
    """Class-pair variables: one per (class c, class d, GPU type t) with c <= d."""

    c: np.ndarray  # (P,) int
    d: np.ndarray  # (P,) int
    t: np.ndarray  # (P,) int
    gain_c: np.ndarray  # (P,) normalised value per unit of pair time for c's job
    gain_d: np.ndarray  # (P,) the same for d's job (c == d: both sides of one job's pairs)
    gpus: np.ndarray  # (P,) GPUs the pair occupies (the common scale factor)

    @staticmethod
    def empty() -> PairVars:
        z = np.zeros(0)
        zi = np.zeros(0, dtype=np.int64)
        return PairVars(zi, zi, zi, z, z, z)

    def __len__(self) -> int:
        return len(self.c)


@dataclass(frozen=True)
class ClassSolution:
    x: np.ndarray  # (C, K) per-job fractions alone
    y: np.ndarray  # (P,) class-pair totals
    value: np.ndarray  # (C,) per-job normalised throughput
    objective: float  # min of value over classes that can run at all (0 if none)
    runnable: np.ndarray  # (C,) bool: the class has at least one variable


def per_job_pair_terms(
    pairs: PairVars, count: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """COO terms (class, pair index, time share, value share) a job gets from the pairs.

    A job of c gets Y/n_c time and gain_c Y/n_c value from a pair with d != c; within
    one class each job sits in two pairs (once on each side): 2Y/n_c time and
    (gain_c + gain_d) Y/n_c value.
    """
    idx = np.arange(len(pairs))
    same = pairs.c == pairs.d
    other = ~same
    cls = np.concatenate([pairs.c, pairs.d[other]])
    col = np.concatenate([idx, idx[other]])
    time = np.concatenate([np.where(same, 2.0, 1.0) / count[pairs.c], 1.0 / count[pairs.d[other]]])
    gain = np.concatenate(
        [
            np.where(same, pairs.gain_c + pairs.gain_d, pairs.gain_c) / count[pairs.c],
            pairs.gain_d[other] / count[pairs.d[other]],
        ]
    )
    return cls, col, time, gain, same


def flat_rows(coef: np.ndarray, allowed: np.ndarray) -> bool:
    """Every class values each of its allowed types alike (relative 1e-12).

    Such an LP (the simulator's type-blind knowledge, max_min_fairness_agnostic) sees
    no difference between types, so its optimal face is the whole set of splits and of
    totals above the minimum, and the vertex a solver returns decides both. There the
    small LP keeps HiGHS's default dual simplex (lp.SMALL_LP_OPTIONS are not used):
    the primal simplex's vertex measured 5-13 % worse average JCT for the type-blind
    baseline on the 1,000-job own-row traces (seeds 0-2; design.md §4.2), an accident
    of its pivoting rule that would move every type-blind comparison made so far.
    """
    if not allowed.any():
        return False
    rows = allowed.any(axis=1)
    top = np.where(allowed, coef, -np.inf).max(axis=1)[rows]
    low = np.where(allowed, coef, np.inf).min(axis=1)[rows]
    return bool(np.all(top - low <= 1e-12 * np.abs(top)))


def solve_max_min_classes(
    coef: np.ndarray,
    allowed: np.ndarray,
    scale: np.ndarray,
    count: np.ndarray,
    capacity: np.ndarray,
    pairs: PairVars | None = None,
    *,
    second_stage: bool = True,
    time_limit: float | None = None,
    solver: str | None = None,
    priced: bool | None = None,
    direct: bool = True,
    decompose: bool | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> ClassSolution:
    """Solve the class max-min LP exactly (HiGHS); see the module docstring.

    `solver` forces HiGHS's "simplex" or "ipm" for stage 1 (default: by size); stage 2
    always re-solves with simplex from stage 1's basis. `priced` forces pair columns
    to enter by pricing (True) or all at once (False); default: by their number.
    `direct=False` keeps LPs without pairs off mm_lp_single's direct path (tests
    compare the two). `decompose` forces (True) or forbids (False) the decomposition
    of dw.py for LPs without pairs; default: from DW_MIN_COLUMNS columns on, with at
    most DW_MAX_TYPES types. `clock` times `time_limit` (read only with a limit).
    """
    pairs = pairs if pairs is not None else PairVars.empty()
    n_cls, n_types = coef.shape
    if decompose is None:
        decompose = (
            solver is None and n_types <= DW_MAX_TYPES and int(allowed.sum()) + 1 >= DW_MIN_COLUMNS
        )
    if decompose and not len(pairs) and allowed.any():
        deadline = Deadline.after(time_limit, "max-min decomposition", clock)
        try:
            found = _decomposed(coef, allowed, scale, count, capacity, second_stage, deadline)
            decomposed("max_min")
            return found
        except DwStalled as e:  # no certified answer: the plain LP below, in the time left
            fell_back("max_min", e.reason, str(e))
        time_limit = deadline.remaining()
    if (
        direct
        and not len(pairs)
        and solver in (None, "simplex")
        and allowed.any()
        and (solver == "simplex" or int(allowed.sum()) + 1 < IPM_MIN_COLUMNS)
    ):
        # No pair columns and simplex: the same LP, built without scipy (mm_lp_single.py).
        x, runnable = solve_single_classes(
            coef, allowed, scale, count, capacity,
            second_stage=second_stage, time_limit=time_limit, slack=STAGE2_SLACK,
            fast=not flat_rows(coef, allowed),
        )  # fmt: skip
        value = (coef * x).sum(axis=1)
        return ClassSolution(x, np.zeros(0), value, float(value[runnable].min()), runnable)
    m = _MaxMinLp.build(coef, allowed, scale, count, capacity, pairs)
    if not m.runnable.any():
        return ClassSolution(
            np.zeros((n_cls, n_types)), np.zeros(len(pairs)), np.zeros(n_cls), 0.0, m.runnable
        )
    # Many pair columns: let them in by pricing (mm_pricing.py); few: all at once.
    active = np.ones(m.zcol + 1, dtype=bool)
    use_pricing = len(pairs) > PRICING_MIN_PAIRS if priced is None else priced
    if use_pricing:
        active[m.nx : m.zcol] = False
    if solver is None:
        solver = "ipm" if int(active.sum()) >= IPM_MIN_COLUMNS else "simplex"
    cost = np.zeros(m.zcol + 1)
    cost[m.zcol] = 1.0
    lp = PricedLp(
        m.a, m.row_lower, m.row_upper, np.full(m.zcol + 1, highspy.kHighsInf), cost, active,
        solver=solver, time_limit=time_limit,
    )  # fmt: skip
    if solver == "simplex" and not len(pairs):
        # mm_lp_single's LP: the same options, the same vertex
        use_small_lp_options(lp.h, fast=not flat_rows(coef, allowed))
    sol = lp.solve("max-min stage 1")
    if second_stage:
        # Total normalised throughput: n_c * value_c summed over classes.
        lp.set_lower(m.zcol, max(float(sol[m.zcol]) * (1 - STAGE2_SLACK), 0.0))
        lp.set_cost(m.stage2_cost(coef, count))
        # On failure keep stage 1's optimum: stage 2 is an improvement, never a requirement.
        with contextlib.suppress(SolverError):
            sol = lp.solve("max-min stage 2")

    x = np.zeros((n_cls, n_types))
    x[m.xc, m.xt] = np.clip(sol[: m.nx], 0.0, 1.0)
    y = np.clip(sol[m.nx : m.zcol], 0.0, None)
    value = class_values(coef, x, pairs, y, count)
    objective = float(value[m.runnable].min())
    return ClassSolution(x, y, value, objective, m.runnable)


def _decomposed(
    coef: np.ndarray,
    allowed: np.ndarray,
    scale: np.ndarray,
    count: np.ndarray,
    capacity: np.ndarray,
    second_stage: bool,
    deadline: Deadline,
) -> ClassSolution:
    """The same two stages by decomposition over the runnable classes (dw.py)."""
    n_cls, n_types = coef.shape
    runnable = np.asarray(allowed.any(axis=1), dtype=bool)
    a = np.where(allowed, coef, 0.0)[runnable]
    ok = allowed[runnable]
    gpus = (count * scale)[runnable]
    cap = capacity.astype(np.float64)
    first = max_min(a, ok, gpus, cap, deadline)
    z, xr, lam = first.z, first.x, first.lam
    if second_stage:
        z0 = max(z * (1 - STAGE2_SLACK), 0.0)
        verts = vertices(a, ok, np.full(len(a), z0))
        start = xr * (z0 / z) if z > 0 else xr  # every job exactly at z0: near a vertex
        total = count[runnable][:, None] * a
        # Past the time limit keep stage 1's optimum, as the plain path does.
        with contextlib.suppress(SolverError):
            xr = max_value(verts, total, gpus, cap, start, lam0=lam, deadline=deadline).x
    x = np.zeros((n_cls, n_types))
    x[runnable] = np.clip(xr, 0.0, 1.0)
    value = (coef * x).sum(axis=1)
    return ClassSolution(x, np.zeros(0), value, float(value[runnable].min()), runnable)


@dataclass
class _MaxMinLp:
    """The class max-min LP in HiGHS's row form: columns x (allowed class-type cells),
    then y (pair columns), then z; rows: z - value_c <= 0 per runnable class, time_c
    <= 1 per class, GPUs used on t <= cap_t per type."""

    a: Any  # scipy.sparse.csc_matrix
    row_lower: np.ndarray
    row_upper: np.ndarray
    xc: np.ndarray
    xt: np.ndarray
    pcls: np.ndarray
    pcol: np.ndarray
    pgain: np.ndarray
    runnable: np.ndarray
    nx: int
    zcol: int

    @classmethod
    def build(
        cls,
        coef: np.ndarray,
        allowed: np.ndarray,
        scale: np.ndarray,
        count: np.ndarray,
        capacity: np.ndarray,
        pairs: PairVars,
    ) -> _MaxMinLp:
        n_cls, n_types = coef.shape
        xc, xt = np.nonzero(allowed)
        nx, npair = len(xc), len(pairs)
        zcol = nx + npair
        pcls, pcol, ptime, pgain, _ = per_job_pair_terms(pairs, count)
        runnable = np.zeros(n_cls, dtype=bool)
        runnable[xc] = True
        runnable[pcls] = True
        fair_rows = np.cumsum(runnable) - 1  # row of each runnable class in block 1
        n_fair = int(runnable.sum())
        b2, b3 = n_fair, n_fair + n_cls  # first rows of blocks 2 and 3
        rows = np.concatenate(
            [
                fair_rows[xc],
                fair_rows[pcls],
                np.arange(n_fair),
                b2 + xc,
                b2 + pcls,
                b3 + xt,
                b3 + pairs.t,
            ]
        )
        cols = np.concatenate(
            [np.arange(nx), nx + pcol, np.full(n_fair, zcol),
             np.arange(nx), nx + pcol,
             np.arange(nx), nx + np.arange(npair)]
        )  # fmt: skip
        vals = np.concatenate(
            [
                -coef[xc, xt], -pgain, np.ones(n_fair),
                np.ones(nx), ptime,
                count[xc] * scale[xc], pairs.gpus,
            ]
        )  # fmt: skip
        n_rows = b3 + n_types
        import scipy.sparse as sp

        a = sp.csc_matrix((vals, (rows, cols)), shape=(n_rows, zcol + 1))
        a.sum_duplicates()
        row_lower = np.full(n_rows, -highspy.kHighsInf)
        row_upper = np.concatenate([np.zeros(n_fair), np.ones(n_cls), capacity.astype(np.float64)])
        return cls(a, row_lower, row_upper, xc, xt, pcls, pcol, pgain, runnable, nx, zcol)

    def stage2_cost(self, coef: np.ndarray, count: np.ndarray) -> np.ndarray:
        """Stage 2's objective: the total normalised throughput, n_c * value_c."""
        cost = np.zeros(self.zcol + 1)
        cost[: self.nx] = count[self.xc] * coef[self.xc, self.xt]
        np.add.at(cost, self.nx + self.pcol, self.pgain * count[self.pcls])
        return cost


def class_values(
    coef: np.ndarray, x: np.ndarray, pairs: PairVars, y: np.ndarray, count: np.ndarray
) -> np.ndarray:
    """Per-job normalised throughput of each class under (x, Y)."""
    value = (coef * x).sum(axis=1)
    if len(pairs):
        pcls, pcol, _, pgain, _ = per_job_pair_terms(pairs, count)
        np.add.at(value, pcls, pgain * y[pcol])
    return value


def solve_sum_classes(
    gain: np.ndarray,
    allowed: np.ndarray,
    scale: np.ndarray,
    count: np.ndarray,
    capacity: np.ndarray,
    *,
    time_limit: float | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> np.ndarray:
    """Maximise sum_c n_c sum_t gain_ct x_ct over the class polytope; return x (C, K).
    `time_limit` covers the decomposition and a plain LP after it stalls, as above."""
    n_cls, n_types = gain.shape
    xc, xt = np.nonzero(allowed)
    nx = len(xc)
    if nx == 0:
        return np.zeros((n_cls, n_types))
    if n_types <= DW_MAX_TYPES and nx + 1 >= SUM_DW_MIN_COLUMNS:
        deadline = Deadline.after(time_limit, "max-sum decomposition", clock)
        try:
            x = _sum_decomposed(gain, allowed, scale, count, capacity, deadline)
            decomposed("max_sum")
            return x
        except DwStalled as e:  # no certified answer: the plain LP below, in the time left
            fell_back("max_sum", e.reason, str(e))
        time_limit = deadline.remaining()
    rows = np.concatenate([xc, n_cls + xt])
    cols = np.concatenate([np.arange(nx), np.arange(nx)])
    vals = np.concatenate([np.ones(nx), count[xc] * scale[xc]])
    import scipy.sparse as sp

    a = sp.csc_matrix((vals, (rows, cols)), shape=(n_cls + n_types, nx))
    sol = solve_lp(
        count[xc] * gain[xc, xt],
        a,
        np.full(n_cls + n_types, -highspy.kHighsInf),
        np.concatenate([np.ones(n_cls), capacity.astype(np.float64)]),
        np.zeros(nx),
        np.full(nx, highspy.kHighsInf),
        maximize=True,
        what="max-min LP",
        time_limit=time_limit,
    )
    x = np.zeros((n_cls, n_types))
    x[xc, xt] = np.clip(sol.x, 0.0, 1.0)
    return x


def _sum_decomposed(
    gain: np.ndarray,
    allowed: np.ndarray,
    scale: np.ndarray,
    count: np.ndarray,
    capacity: np.ndarray,
    deadline: Deadline,
) -> np.ndarray:
    """solve_sum_classes by decomposition (dw.max_value): each class's polytope is the
    simplex sum_t x_t <= 1, i.e. Q(0) of dw.py with its vertices "all the time on one
    allowed type" and 0 (the w / a_t vertices coincide with 0 at w = 0 and are left
    out, so that they are not mistaken for ties)."""
    n_cls, n_types = gain.shape
    runnable = np.asarray(allowed.any(axis=1), dtype=bool)
    a = np.where(allowed, gain, 0.0)[runnable]
    a = a / (float(a.max()) or 1.0)  # same argmax; the master's tolerances are absolute
    verts = vertices(a, allowed[runnable], np.zeros(len(a)))
    verts.valid[:, :n_types] = False
    xr = max_value(
        verts,
        count[runnable][:, None] * a,
        (count * scale)[runnable],
        capacity.astype(np.float64),
        np.zeros(a.shape),
        deadline=deadline,
    ).x
    x = np.zeros((n_cls, n_types))
    x[runnable] = np.clip(xr, 0.0, 1.0)
    return x
