"""Exact LPs over many distinct jobs and few GPU types, by decomposition (Dantzig-Wolfe).

With per-job throughput rows no two jobs form a class, and the max-min and
stretch LPs have ~3N columns and ~2N rows that are very degenerate: HiGHS needs
1-3 s at 10,000 jobs, nearly all of it inside its IPM + crossover. But only K
rows (one per GPU type: capacity) couple the jobs; everything else is one
job's own small polytope

    Q_j(w) = {x >= 0 : x_t = 0 where not allowed, a_j . x >= w, sum_t x_t <= 1}

(a_j: the job's coefficients, w: the value it must get). Its vertices are known
in closed form (`vertices`: w/a_t on one type, all the time on one type, or a
two-type mix on the full-time face), so pricing the K coupling rows at prices
lam and letting every job pick its cheapest vertex is one vectorised argmin.

Dantzig-Wolfe finds the prices: a master LP with K + 1 rows whose columns are
whole-cluster proposals (the GPUs all jobs' picks use), re-solved warm in HiGHS
after each pricing round; each round also gives a Lagrangian bound. It gets
within ~1e-8 in a few dozen rounds (milliseconds each) and then stalls on jobs
that tie at the optimal prices. So the exact answer comes from a restricted LP
(`_restricted`): every job fixed at its cheapest vertex under those prices except
the near-ties, which keep a column per vertex and a convexity row. The jobs its
duals price out of their picks are freed and it is solved again until none is.

The certificate. For any prices lam >= 0 on the K capacity rows the LP splits
into one small LP per job (the Lagrangian relaxation), whose optimum is the job's
cheapest vertex at lam; summed (`_bound`), that is a bound on the LP's optimum
from the dual side: below it for the min problems here, above it for max_value's
(its cost is the negated value). It holds for *any* lam >= 0, so a wrong price
makes it weaker, never wrong. The restricted LP's allocation is the primal side:
feasible, its objective attained. Every result carries both (`BetaResult`,
`MaxMinResult`, `ValueResult`), and none is returned unless `certify` finds the
bound on its side of the primal value (a bound past it means one of the two is
wrong) and the gap between them within CHECK_REL_GAP (1e-9 relative), and the
allocation feasible to that tolerance. In a degenerate LP the answer may be
another optimal point than HiGHS's vertex. Otherwise `DwStalled` is raised, with
a fixed reason code, and the caller solves the plain LP (recording the fallback:
solve_paths.py).

Every HiGHS run here gets what is left of the caller's Deadline (deadline.py); past
it, a SolverError, not DwStalled (the plain LP would only take longer).

Two LPs are solved this way:

* `min_beta`: min beta s.t. x_j in Q_j(w_j), sum_j g_j x_j <= beta cap (the
  stretch LP of ftf_solver.py with one class per job, via ftf_dw.py; g_j GPUs per
  unit of time, the scale factor times the class size).
* `max_value`: max sum_j v_j . x_j s.t. x_j in Q_j(w_j), sum_j g_j x_j <= cap
  (stage 2 of max-min fairness: the total normalised throughput with every job
  held at the minimum; max_sum_throughput with w = 0, Q_j the simplex).

`max_min` finds stage 1 of max-min fairness, max z with beta(z) <= 1, by
safeguarded Newton on the convex beta(z) (its slope comes from the same picks).
Its certificate is the bracket [z, dual_bound] on z*: z from a feasible
allocation, dual_bound from min_beta's dual bounds (max_min says why that is valid).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import highspy
import numpy as np

from slurm_gavel.errors import SolveError
from slurm_gavel.policies.solvers.deadline import NO_DEADLINE, Deadline

INF = highspy.kHighsInf
#: At most this many GPU types: a job has K + K + K(K-1)/2 + 1 candidate vertices.
DW_MAX_TYPES = 6
DW_REL_GAP = 1e-12
CHECK_REL_GAP = 1e-9
# ... and an absolute floor, for an optimum of 0 (rounding in a sum of N terms)
CHECK_ABS_GAP = 1e-12
PRICE_ROUNDS = 200
#: Tied jobs are moved off an unpriced type until its fixed picks fill at most this
#: share of it: filled to the brim, the restricted LP's duals priced it and freed the
#: jobs on it after all.
SPREAD_FILL = 0.9
NEWTON_REL_GAP = 1e-10
NEWTON_MAX_STEPS = 100


def worth_decomposing(
    n_jobs: int, n_classes: int, n_types: int, min_jobs: int, min_class_share: float
) -> bool:
    """Whether a class LP goes to the decomposition: at most DW_MAX_TYPES types, at
    least `min_jobs` jobs, and (almost) no two alike (at least `min_class_share`
    classes per job)."""
    return n_types <= DW_MAX_TYPES and n_jobs >= min_jobs and n_classes >= min_class_share * n_jobs


class DwStalled(SolveError):
    """The decomposition has no certified answer; the caller solves the plain LP.

    `reason` is one of REASONS (a fixed code: the daemon counts fallbacks by it),
    the message says what happened with its numbers."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason if reason in REASONS else "other"


#: Why a decomposition can stop without a certified answer.
REASONS = (
    "master_status",  # HiGHS did not solve the master LP (numerical trouble)
    "restricted_status",  # ... nor the restricted LP
    "pricing_unsettled",  # the restricted LP kept freeing jobs
    "gap_open",  # primal value and dual bound further apart than CHECK_REL_GAP
    "bound_crosses_primal",  # the dual bound is past the primal value: one is wrong
    "primal_infeasible",  # the allocation breaks a constraint by more than the tolerance
    "bracket_open",  # max_min's Newton did not close [z, dual bound]
    "crossing_not_found",  # hier_parametric: no crossing of beta = 1
    "no_dual",  # hier_parametric / hier_dw: the prices give no (checked) job duals
    "other",
)


@dataclass(frozen=True)
class Vertices:
    """Candidate vertices of every Q_j(w_j): v (N, M, K), their d/dw (N, M, K), valid (N, M)."""

    v: np.ndarray
    dv: np.ndarray
    valid: np.ndarray


def vertices(a: np.ndarray, allowed: np.ndarray, w: np.ndarray) -> Vertices:
    """The vertices of Q_j(w_j) for every job (see the module docstring); all candidates
    are listed, those that are not vertices of a job's polytope marked invalid."""
    n, k = a.shape
    ok = allowed & (a > 0)
    pairs = [(t, u) for t in range(k) for u in range(t + 1, k)]
    m = 2 * k + len(pairs) + 1
    v = np.zeros((n, m, k))
    dv = np.zeros((n, m, k))
    valid = np.zeros((n, m), dtype=bool)
    safe = np.where(ok, a, 1.0)
    wc = w[:, None]
    for t in range(k):
        # w / a_t on type t alone (the value row tight)
        fits = ok[:, t] & (a[:, t] >= w)
        v[:, t, t] = w / safe[:, t]
        dv[:, t, t] = 1.0 / safe[:, t]
        valid[:, t] = fits
        # all the time on type t (the time row tight, value to spare)
        v[:, k + t, t] = 1.0
        valid[:, k + t] = fits
    for p, (t, u) in enumerate(pairs):
        col = 2 * k + p
        at, au = a[:, t], a[:, u]
        straddle = ok[:, t] & ok[:, u] & ((at - wc[:, 0]) * (au - wc[:, 0]) < 0)
        diff = np.where(straddle, at - au, 1.0)
        xt = np.where(straddle, (w - au) / diff, 0.0)
        v[:, col, t] = xt
        v[:, col, u] = np.where(straddle, 1.0 - xt, 0.0)
        dv[:, col, t] = np.where(straddle, 1.0 / diff, 0.0)
        dv[:, col, u] = -dv[:, col, t]
        valid[:, col] = straddle
    valid[:, m - 1] = w <= 0  # x = 0
    return Vertices(v, dv, valid)


def _new_highs() -> Any:  # highspy._Highs, not in highspy's stubs
    h = highspy._Highs()  # type: ignore[attr-defined]
    h.setOptionValue("output_flag", False)
    h.setOptionValue("solver", "simplex")
    # The default 1e-7 leaves the aggregated master ~1e-8 short of the optimum.
    h.setOptionValue("primal_feasibility_tolerance", 1e-10)
    h.setOptionValue("dual_feasibility_tolerance", 1e-10)
    return h


class _Master:
    """The DW master in HiGHS: min cost . mu s.t. sum_i mu_i G_i <= rhs (K rows),
    sum_i mu_i = 1; optionally a free column beta with -cap in the K rows."""

    def __init__(
        self, k: int, rhs: np.ndarray, beta_cap: np.ndarray | None, deadline: Deadline
    ) -> None:
        h = _new_highs()
        self.deadline = deadline
        lower = np.concatenate([np.full(k, -INF), [1.0]])
        upper = np.concatenate([rhs, [1.0]])
        h.addRows(k + 1, lower, upper, 0, np.zeros(0, np.int32), np.zeros(0, np.int32), np.zeros(0))
        self.k = k
        self.cols = 0
        if beta_cap is not None:
            h.addCols(1, np.array([1.0]), np.array([0.0]), np.array([INF]), k,
                      np.array([0], np.int32), np.arange(k, dtype=np.int32), -beta_cap)  # fmt: skip
            self.cols = 1
        self.first_mu = self.cols
        self.h = h

    def add(self, cost: float, g: np.ndarray) -> None:
        self.h.addCols(1, np.array([cost]), np.array([0.0]), np.array([INF]), self.k + 1,
                       np.array([0], np.int32), np.arange(self.k + 1, dtype=np.int32),
                       np.concatenate([g, [1.0]]))  # fmt: skip
        self.cols += 1

    def solve(self) -> tuple[float, np.ndarray, np.ndarray]:
        """(objective, column values, lam = capacity prices >= 0)."""
        status = self.deadline.run(self.h)
        if status != highspy.HighsModelStatus.kOptimal:  # numerical trouble: the plain LP
            raise DwStalled(
                "master_status",
                f"decomposition master: HiGHS stopped with status "
                f"'{self.h.modelStatusToString(status)}'",
            )
        sol = self.h.getSolution()
        lam = np.maximum(-np.asarray(sol.row_dual)[: self.k], 0.0)
        return float(self.h.getInfo().objective_function_value), np.asarray(sol.col_value), lam


@dataclass(frozen=True)
class BetaResult:
    """min_beta's answer, certified: dual_bound <= beta* <= beta, beta - dual_bound
    <= CHECK_REL_GAP * beta."""

    beta: float  # primal: the capacity scaling x needs (the restricted LP's optimum)
    dual_bound: float  # dual: the Lagrangian bound at the best prices seen (<= beta*)
    x: np.ndarray  # (N, K) per unit (job or class) fractions, using beta * cap
    slope: float  # d beta / d w along dw (a subgradient), if dw was given
    lam: np.ndarray  # final prices, lam . cap = 1


@dataclass(frozen=True)
class ValueResult:
    """max_value's answer, certified: value <= optimum <= dual_bound, to CHECK_REL_GAP."""

    x: np.ndarray  # (N, K)
    value: float  # primal: sum_j value_j . x_j of x (the restricted LP's optimum)
    dual_bound: float  # dual: the Lagrangian bound at the best prices seen (>= optimum)


@dataclass(frozen=True)
class MaxMinResult:
    """max_min's answer, certified: z <= z* <= dual_bound, dual_bound - z <=
    CHECK_REL_GAP * z."""

    z: float  # primal: every job gets a_j . x_j >= z from x
    dual_bound: float  # dual: from min_beta's dual bounds (max_min's docstring)
    x: np.ndarray  # (N, K), within the cluster
    lam: np.ndarray  # the last solve's prices, lam . cap = 1


def _check_primal(what: str, x: np.ndarray, gpus: np.ndarray, limit: np.ndarray) -> None:
    """Raise DwStalled unless x (N, K) is a feasible allocation: no negative share, no
    job over all of its time, the capacity use within `limit` (K,), each to
    CHECK_REL_GAP (the value rows a_j . x_j >= w_j hold by construction: every job's x
    is a convex combination of its polytope's vertices, or one of them)."""
    time_over = float(x.sum(axis=1).max(initial=0.0)) - 1.0
    use = gpus @ x
    cap_over = float((use - limit - CHECK_REL_GAP * np.maximum(np.abs(limit), 1.0)).max())
    if float(x.min(initial=0.0)) < -CHECK_REL_GAP or time_over > CHECK_REL_GAP or cap_over > 0:
        raise DwStalled(
            "primal_infeasible",
            f"{what}: the allocation is not feasible (least share {float(x.min(initial=0.0)):.3g}, "
            f"time over 1 by {time_over:.3g}, capacity over by {cap_over:.3g} GPUs)",
        )


def certify(what: str, primal: float, dual_bound: float, minimise: bool) -> None:
    """Raise DwStalled unless dual_bound is on its side of primal (below it when
    minimising, above when maximising; rounding aside) and within CHECK_REL_GAP of
    it, relative to the primal value (CHECK_ABS_GAP at least): the optimum then lies
    between the two."""
    gap = primal - dual_bound if minimise else dual_bound - primal
    tol = max(CHECK_REL_GAP * abs(primal), CHECK_ABS_GAP)
    if np.isnan(gap) or gap < -tol:
        raise DwStalled(
            "bound_crosses_primal",
            f"{what}: dual bound {dual_bound!r} past the primal value {primal!r}; "
            "one of them is wrong",
        )
    if gap > tol:
        raise DwStalled(
            "gap_open",
            f"{what}: primal value {primal!r} and dual bound {dual_bound!r} are "
            f"{gap / (abs(primal) or 1.0):.3g} apart (relative), above {CHECK_REL_GAP:g}",
        )


@dataclass(frozen=True)
class _Program:
    """One LP over the jobs' vertices: min cost (or beta, scaling cap) subject to the
    capacity rows sum_j gpus_j x_j <= cap (times beta when beta)."""

    verts: Vertices
    cost: np.ndarray  # (N, M) each vertex's cost
    gpus: np.ndarray  # (N,) GPUs per unit
    cap: np.ndarray  # (K,) GPUs per type
    beta: bool  # minimise the capacity scale instead of the cost
    deadline: Deadline = NO_DEADLINE


def _prices(
    prog: _Program, lam: np.ndarray, start: np.ndarray | None, start_cost: float = 0.0
) -> tuple[np.ndarray, float]:
    """Near-optimal capacity prices by the aggregated master (one convexity row): it
    gets within ~1e-8 in a few dozen rounds, then stalls on jobs that tie at the
    optimal prices (every round picks the same side of each tie)."""
    verts, cost, gpus, cap, beta = prog.verts, prog.cost, prog.gpus, prog.cap, prog.beta
    n, _, k = verts.v.shape
    rows = np.arange(n)
    master = _Master(k, np.zeros(k) if beta else cap, cap if beta else None, prog.deadline)
    if start is not None:
        master.add(start_cost, gpus @ start)
    upper, stall, lower = np.inf, 0, -np.inf
    for _ in range(PRICE_ROUNDS):
        red = np.where(verts.valid, cost + (verts.v @ lam) * gpus[:, None], np.inf)
        pick = np.argmin(red, axis=1)
        lower = max(lower, _bound(red[rows, pick], lam, cap, beta))
        if np.isfinite(upper) and upper - lower <= DW_REL_GAP * abs(upper):
            break
        master.add(float(cost[rows, pick].sum()), gpus @ verts.v[rows, pick])
        try:
            obj, _, new = master.solve()
        except DwStalled:
            # HiGHS gave up on the master (status Unknown: near-duplicate proposals at
            # these tolerances; 36 times in the whole Philly trace with per-job rows,
            # each sending that LP to the plain solver). The prices so far are only a
            # start for the restricted LP, which prices on from its own duals and is
            # returned only certified: go on with them.
            break
        stall = stall + 1 if obj >= upper - 1e-13 * abs(upper) else 0
        upper = obj
        if stall >= 3:
            break
        if float(new @ cap) > 0:
            lam = new
    return lam, lower


def _bound(best: np.ndarray, lam: np.ndarray, cap: np.ndarray, beta: bool) -> float:
    """The Lagrangian lower bound at prices lam from every job's cheapest vertex."""
    if beta:
        return float(best.sum()) / float(lam @ cap) if float(lam @ cap) > 0 else 0.0
    return float(best.sum()) - float(lam @ cap)


@dataclass(frozen=True)
class _Restricted:
    obj: float  # primal: the restricted LP's optimum, attained by x
    bound: float  # dual: the best Lagrangian bound seen (<= the full LP's optimum)
    x: np.ndarray  # (N, K)
    lam: np.ndarray  # the restricted LP's capacity prices
    pick: np.ndarray  # (N,) every job's cheapest vertex at lam


def _restricted(prog: _Program, lam: np.ndarray, lower: float) -> _Restricted:
    """The exact LP with every job fixed at its cheapest vertex under `lam` except those
    near a tie (and any that pricing later finds should move): one convexity row and
    a column per vertex for each of those. Priced over all jobs at the LP's own duals
    until no vertex of any job has negative reduced cost, it is the full LP's optimum.
    `lower`: a Lagrangian bound already known (the master's). Returned only
    certified (the module docstring), else DwStalled."""
    verts, cost, gpus, cap, beta = prog.verts, prog.cost, prog.gpus, prog.cap, prog.beta
    n, _, k = verts.v.shape
    rows = np.arange(n)
    # Ties a job cannot lose by (a vertex that uses no more of any type, as when a type's
    # price is 0) are broken towards the smaller GPU share; only real near-ties stay free:
    # a vertex within the width of the pick that cannot do better than it frees nothing
    # (_ties_with_pick). Counted as ties, they freed 6,000-8,000 of 10,000 jobs of
    # the hierarchical path once a plentiful type's price was 0: restricted LPs of
    # 30,000 columns, 0.3-0.9 s each.
    share = np.where(verts.valid, (verts.v @ (1.0 / cap)) * gpus[:, None], np.inf)
    red = np.where(verts.valid, cost + (verts.v @ lam) * gpus[:, None], np.inf)
    scale_ = float(np.abs(red.min(axis=1)).max()) or 1.0
    broken = red + 1e-8 * scale_ * share / float(share[verts.valid].max())
    pick = np.argmin(broken, axis=1)
    no_better, same_but_unpriced = _ties_with_pick(verts, cost, pick, lam)
    gap_to_pick = np.where(no_better, np.inf, broken - broken[rows, pick][:, None])
    gap_to_pick[rows, pick] = np.inf
    nearest = gap_to_pick.min(axis=1)
    width = 1e-6
    free = nearest <= width * scale_
    # Ties whose vertices differ from the pick only on types whose price is 0 stay
    # fixed while the fixed picks leave those types room (either vertex fits then):
    # jobs on an overfull one move to a tied vertex on the type with the most room
    # left, and those that cannot are freed after all. (Freed, they were ~4,000 of
    # 10,000 jobs at a plentiful type's crossing: restricted LPs of 20,000 columns.)
    unpriced = same_but_unpriced & (gap_to_pick <= width * scale_)
    real_tie = np.where(unpriced, np.inf, gap_to_pick).min(axis=1) <= width * scale_
    by_price = free & ~real_tie
    if by_price.any():
        room = cap * (max(lower, 0.0) if beta else 1.0)
        pick = _spread_ties(verts, gpus, pick, unpriced, by_price, ~real_tie, room, lam)
        use = gpus[~real_tie] @ verts.v[rows[~real_tie], pick[~real_tie]]
        full = (lam <= 0.0) & (use > room)
        free = real_tie | (by_price & (verts.v[rows, pick][:, full] > 0).any(axis=1))
    for _ in range(50):
        fixed = ~free
        fixed_use = gpus[fixed] @ verts.v[rows[fixed], pick[fixed]]
        jobs = np.nonzero(free)[0]
        h = _new_highs()
        nf = len(jobs)
        h.addRows(k, np.full(k, -INF), (np.zeros(k) if beta else cap) - fixed_use, 0,
                  np.zeros(0, np.int32), np.zeros(0, np.int32), np.zeros(0))  # fmt: skip
        h.addRows(nf, np.ones(nf), np.ones(nf), 0, np.zeros(0, np.int32),
                  np.zeros(0, np.int32), np.zeros(0))  # fmt: skip
        if beta:
            h.addCols(1, np.array([1.0]), np.array([0.0]), np.array([INF]), k,
                      np.array([0], np.int32), np.arange(k, dtype=np.int32), -cap)  # fmt: skip
        jj, mm = np.nonzero(verts.valid[jobs])
        use = gpus[jobs[jj], None] * verts.v[jobs[jj], mm]  # (P, K)
        ncol = len(jj)
        idx = np.concatenate([np.tile(np.arange(k), (ncol, 1)), (k + jj)[:, None]], axis=1)
        val = np.concatenate([use, np.ones((ncol, 1))], axis=1)
        h.addCols(ncol, cost[jobs[jj], mm], np.zeros(ncol), np.full(ncol, INF), ncol * (k + 1),
                  np.arange(0, ncol * (k + 1), k + 1, dtype=np.int32),
                  idx.ravel().astype(np.int32), val.ravel())  # fmt: skip
        status = prog.deadline.run(h)
        if status == highspy.HighsModelStatus.kModelEmpty and nf == 0:
            # Every job fixed: HiGHS sees rows without columns and checks nothing.
            fits = (fixed_use <= (0 if beta else cap) + 1e-9 * cap).all()
            status = (highspy.HighsModelStatus.kOptimal if fits
                      else highspy.HighsModelStatus.kInfeasible)  # fmt: skip
        if status == highspy.HighsModelStatus.kInfeasible and not beta and not free.all():
            # The fixed picks overfill a type: the prices were off; free more jobs.
            width *= 100.0
            free |= nearest <= width * scale_ if width < 1.0 else True
            continue
        if status != highspy.HighsModelStatus.kOptimal:
            raise DwStalled("restricted_status", f"restricted LP: {h.modelStatusToString(status)}")
        sol = h.getSolution()
        obj = float(h.getInfo().objective_function_value)
        if not beta:
            obj += float(cost[rows[fixed], pick[fixed]].sum())
        duals = np.asarray(sol.row_dual)
        if len(duals) >= k:
            lam = np.maximum(-duals[:k], 0.0)
        red = np.where(verts.valid, cost + (verts.v @ lam) * gpus[:, None], np.inf)
        best = red.min(axis=1)
        lower = max(lower, _bound(best, lam, cap, beta))
        tol = 1e-9 * (float(np.abs(best).max()) or 1.0)
        # Optimal once the bound meets the objective (prices from the aggregated master
        # prove it); else move the fixed jobs these duals price out of their picks.
        done = obj - lower <= CHECK_REL_GAP * abs(obj)
        moved = np.zeros(n, dtype=bool) if done else fixed & (red[rows, pick] > best + tol)
        if not moved.any():
            colv = np.asarray(sol.col_value)[1 if beta else 0 :]
            x = np.zeros((n, k))
            x[fixed] = verts.v[rows[fixed], pick[fixed]]
            np.add.at(x, jobs[jj], colv[:, None] * verts.v[jobs[jj], mm])
            # Nothing left to move: the certificate holds or the plain LP runs (no
            # pick is off by more than tol, yet their sum can be).
            what = "restricted LP (capacity scaling)" if beta else "restricted LP"
            certify(what, obj, lower, minimise=True)
            _check_primal(what, x, gpus, obj * cap if beta else cap)
            return _Restricted(obj, lower, x, lam, np.argmin(red, axis=1))
        free |= moved
        pick = np.where(moved, np.argmin(red, axis=1), pick)
    raise DwStalled("pricing_unsettled", "restricted LP: pricing did not settle")


def _ties_with_pick(
    verts: Vertices, cost: np.ndarray, pick: np.ndarray, lam: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Each job's (N, M) vertices against its pick, in one pass over them:

    * no better: vertices that use at least as much of every type as the pick (to
      1e-9: vertices that coincide, as a two-type mix with 1e-11 of one type, among
      them) at no lower cost: swapping one for the pick never hurts a solution, so a tie
      with it frees nothing. (Ties that differ on types whose price is 0 are real:
      fixing those jobs too overfilled such a type and freed more jobs later, 2-3x
      slower.)
    * same but unpriced: vertices at the pick's cost (to rounding) that differ from it
      only on types whose price is 0."""
    rows = np.arange(len(pick))
    chosen = verts.v[rows, pick][:, None, :]  # (N, 1, K)
    at_pick = cost[rows, pick][:, None]
    tol = 1e-12 * (np.abs(cost).max() or 1.0)
    more = (verts.v >= chosen - 1e-9).all(axis=2)
    no_better = verts.valid & more & (cost >= at_pick - tol)
    same = (np.abs(verts.v - chosen) <= 1e-9) | (lam <= 0.0)
    unpriced = verts.valid & same.all(axis=2) & (np.abs(cost - at_pick) <= tol)
    return no_better, unpriced


def _spread_ties(
    verts: Vertices,
    gpus: np.ndarray,
    pick: np.ndarray,
    unpriced: np.ndarray,
    movable: np.ndarray,
    counted: np.ndarray,
    room: np.ndarray,
    lam: np.ndarray,
) -> np.ndarray:
    """Picks with the movable jobs on an overfull unpriced type moved to a tied vertex
    (`unpriced`, N x M) on the unpriced type with the most room left, greedily, largest
    users first, until the type fits. `counted`: the jobs whose picks fill the types."""
    rows = np.arange(len(pick))
    pick = pick.copy()
    use = gpus[counted] @ verts.v[rows[counted], pick[counted]]
    for t in np.nonzero((lam <= 0.0) & (use > room))[0]:
        on_t = np.nonzero(movable & (verts.v[rows, pick, t] > 0) & unpriced.any(axis=1))[0]
        on_t = on_t[np.argsort(-gpus[on_t] * verts.v[on_t, pick[on_t], t], kind="stable")]
        for j in on_t.tolist():
            if use[t] <= SPREAD_FILL * room[t]:
                break
            here = verts.v[j, pick[j]] * gpus[j]
            best, best_fill = -1, np.inf
            for m in np.nonzero(unpriced[j])[0].tolist():
                there = verts.v[j, m] * gpus[j]
                if there[t] >= here[t]:
                    continue
                after = use - here + there
                fill = float(np.max(np.where(lam <= 0.0, after / room, 0.0)))
                if fill < best_fill:
                    best, best_fill = m, fill
            if best >= 0:
                use += verts.v[j, best] * gpus[j] - here
                pick[j] = best
    return pick


def min_beta(
    verts: Vertices,
    gpus: np.ndarray,
    cap: np.ndarray,
    dw: np.ndarray | None = None,
    lam0: np.ndarray | None = None,
    deadline: Deadline = NO_DEADLINE,
) -> BetaResult:
    """min beta s.t. x_j in Q_j, sum_j gpus_j x_j <= beta cap (every Q_j non-empty)."""
    n, m, k = verts.v.shape
    rows = np.arange(n)
    lam = np.full(k, 1.0 / cap.sum()) if lam0 is None else lam0
    cost = np.zeros((n, m))
    prog = _Program(verts, cost, gpus, cap, True, deadline)
    lam, lower = _prices(prog, lam, None)
    r = _restricted(prog, lam, lower)
    slope = 0.0
    norm = float(r.lam @ cap) or 1.0
    if dw is not None:
        slope = float((gpus * dw) @ (verts.dv[rows, r.pick] @ r.lam)) / norm
    return BetaResult(r.obj, r.bound, r.x, slope, r.lam / norm)


def beta_bound(
    verts: Vertices,
    gpus: np.ndarray,
    cap: np.ndarray,
    lam0: np.ndarray | None = None,
    deadline: Deadline = NO_DEADLINE,
) -> tuple[float, np.ndarray]:
    """(a lower bound on min_beta's beta, the prices that give it), from the master's
    pricing alone: no restricted LP. Enough to tell that a profile far from fitting
    does not fit (the bound holds for any prices, so it is never wrong, only weak),
    where min_beta's restricted LP would free every job that ties between two types
    whose price is 0 (0.4-0.6 s at 10,000 jobs)."""
    k = verts.v.shape[2]
    lam = np.full(k, 1.0 / cap.sum()) if lam0 is None else lam0
    prog = _Program(verts, np.zeros(verts.valid.shape), gpus, cap, True, deadline)
    lam, lower = _prices(prog, lam, None)
    norm = float(lam @ cap) or 1.0
    return lower, lam / norm


def max_value(
    verts: Vertices,
    value: np.ndarray,
    gpus: np.ndarray,
    cap: np.ndarray,
    start: np.ndarray,
    lam0: np.ndarray | None = None,
    deadline: Deadline = NO_DEADLINE,
) -> ValueResult:
    """max sum_j value_j . x_j s.t. x_j in Q_j, sum_j gpus_j x_j <= cap; `start` (N, K) is
    a feasible point (the master's first column, so that it is feasible from the
    start).

    The restricted LP starts from every job's cheapest vertex at the master's prices
    (an earlier version started every job at `start` and freed those the prices moved:
    nearly all of them, as slow as the plain LP). Fixed picks that overfill a type
    free more jobs (_restricted); the certificate is min_beta's, its signs flipped
    (the restricted LP minimises the negated value)."""
    # Minimise -value: HiGHS's duals of the <= rows are then <= 0, lam = -dual >= 0.
    k = verts.v.shape[2]
    cost = -np.einsum("nmk,nk->nm", verts.v, value)
    lam = np.full(k, 1.0 / cap.sum()) if lam0 is None else lam0

    # Stage 1's prices are right up to scale: pick the scale by the Lagrangian bound
    # (convex in it), golden section on a log scale.
    def bound(mu: float) -> float:
        red = np.where(verts.valid, cost + (verts.v @ (mu * lam)) * gpus[:, None], np.inf)
        return _bound(red.min(axis=1), mu * lam, cap, False)

    lo_, hi_ = -12.0, 12.0
    scale0 = float(np.abs(cost).max()) / (float(((verts.v @ lam) * gpus[:, None]).max()) or 1.0)
    g = (np.sqrt(5) - 1) / 2
    for _ in range(30):  # to ~1e-5 of the scale: a starting point, not the answer
        m1, m2 = hi_ - g * (hi_ - lo_), lo_ + g * (hi_ - lo_)
        if bound(scale0 * np.exp(m1)) > bound(scale0 * np.exp(m2)):
            hi_ = m2
        else:
            lo_ = m1
    lam = lam * scale0 * np.exp(0.5 * (lo_ + hi_))
    prog = _Program(verts, cost, gpus, cap, False, deadline)
    lam, lower = _prices(prog, lam, start, -float((value * start).sum()))
    r = _restricted(prog, lam, lower)
    return ValueResult(r.x, -r.obj, -r.bound)


def max_min(
    a: np.ndarray,
    allowed: np.ndarray,
    gpus: np.ndarray,
    cap: np.ndarray,
    deadline: Deadline = NO_DEADLINE,
) -> MaxMinResult:
    """Stage 1 of max-min fairness: z and x (N, K) feasible with every a_j . x_j >= z,
    certified by a dual bound on z* (MaxMinResult).

    Every unit (row) must be able to run somewhere. beta(z) = min capacity scaling
    with every job at value z is convex, increasing, and beta(0) = 0, so beta(c z)
    >= c beta(z) for c >= 1. Each solve gives beta_primal >= beta(z) >= beta_bound
    (min_beta's certificate) and so brackets z*:
      * z / beta_primal is attained (x / beta_primal fits the cluster) when
        beta_primal > 1, z itself when beta_primal <= 1: the primal side;
      * z* <= z when beta_bound >= 1 (then beta(z) >= 1 = beta(z*), beta increasing);
        z* <= z / beta_bound when 0 < beta_bound < 1 (if z* > z, c = z*/z > 1 gives
        1 = beta(z*) >= (z* / z) beta(z) >= (z* / z) beta_bound): the dual side.
    Newton from the best upper bound, bisection as a safeguard, until the two sides
    meet to NEWTON_REL_GAP; the returned certificate is checked by `certify`.
    """
    n = a.shape[0]
    ones = np.ones(n)
    hi = float(np.where(allowed, a, 0.0).max(axis=1).min())  # each job alone on its best type
    lo = 0.0
    z = hi
    lam = None
    best: tuple[float, np.ndarray] | None = None
    for _ in range(NEWTON_MAX_STEPS):
        res = min_beta(
            vertices(a, allowed, z * ones), gpus, cap, dw=ones, lam0=lam, deadline=deadline
        )
        lam = res.lam
        # X meets value z on beta * cap; scaled by 1 / beta (beta > 1) it fits the cluster.
        feasible, x = (z / res.beta, res.x / res.beta) if res.beta > 1.0 else (z, res.x)
        if feasible > lo:
            lo, best = feasible, (feasible, x)
        if res.dual_bound >= 1.0:
            hi = min(hi, z)
        elif res.dual_bound > 0.0:
            hi = min(hi, z / res.dual_bound)
        if hi - lo <= NEWTON_REL_GAP * hi:
            break
        step = z - (res.beta - 1.0) / res.slope if res.slope > 0 else np.nan
        z = step if lo < step < hi else 0.5 * (lo + hi)
    else:
        raise DwStalled(
            "bracket_open", f"max-min decomposition: bracket [{lo:.12g}, {hi:.12g}] did not close"
        )
    assert best is not None and lam is not None
    z, x = best
    certify("max-min decomposition", z, hi, minimise=False)
    # The primal side, checked on the allocation itself: every job at z, within the cluster.
    _check_primal("max-min decomposition", x, gpus, cap)
    least = float((a * x).sum(axis=1).min())
    if least < z * (1.0 - CHECK_REL_GAP):
        raise DwStalled(
            "primal_infeasible",
            f"max-min decomposition: a job gets {least!r}, below the minimum {z!r}",
        )
    return MaxMinResult(z, hi, x, lam)
