"""Hierarchical water filling along its own path: the levels where only jobs' time rows bind.

With per-job rows the LP loop of hier_water_filling needs one level per
job that reaches its own maximum: while the GPUs are not yet scarce, the level LP's
capacity prices are 0 and each level ends when the next job runs all the time on
its best type (1,000 distinct jobs with 3 accounts: 128 such levels, then one
level where the capacity rows bind and every other job freezes; 10,000 jobs did
not finish in 600 s). Those levels need no LP. With the common level tau rising,
a job j of entity e (unfrozen) rises at W_e w_j / (S_e s_j) with S_e the weight
of e's unfrozen jobs, so within an entity every unfrozen job's level is
w_j mu_e / s_j for one entity clock mu_e (d mu_e / d tau = W_e / S_e), and j
freezes when that reaches M_j = max_t coef_jt (alone on its best type). `path`
replays these events exactly as the LP loop meets them: each level ends where
the next job reaches M_j, and then every job that cannot rise by the loop's
margin (M_j - level_j below max(1e-4 level_j, 1e-5)) freezes too.

That path is the water filling as long as its levels fit the cluster: then
every unfrozen job can still rise (the profile a little further on is feasible)
and a job at M_j cannot. Whether the profile L(tau) fits is beta(L(tau)) <= 1,
the least capacity scaling that meets every level, which dw.min_beta finds
exactly (per job cheapest vertex under capacity prices; certified to 1e-9).
beta(L(tau)) increases with tau, and between events (L(tau) linear there) it is
convex: safeguarded Newton (bisection when a step leaves the bracket) finds the
crossing tau_cap, started where the Lagrangian bound at the prices of the
all-full solve reaches 1 (cheap, no LP, and above the crossing: min_beta far
above it can take seconds). 7 solves at 10,000 jobs.

At tau_cap the capacity rows bind. The prices lam of that solve give each job's
own dual (y_j, u_j) at its level V_j (hier_dw.job_duals): for any allocation
within the capacity, sum_j (y_j V'_j - u_j) <= lam . cap = 1, so lifting job j by
delta with everyone else held needs y_j delta <= 1 - sum_j C_j(V_j) (C_j: the
job's least cost of V_j at lam, the same sum). A job with y_j margin_j above that
gap is bottlenecked: proven. At a kink of a job's cost its duals form a range and
the largest y is taken (job_duals(largest_y=True)). If every unfrozen job is
proven, the water filling ends here (the usual case with all GPU types scarce);
otherwise the jobs left rise again along a new path from that state, to the next
crossing (with one type so plentiful that its price is 0 this proves about one job
per crossing, as the LP loop's levels do). A crossing that proves no job, or
MAX_ROUNDS of them, hands the state (levels, frozen jobs) to the LP loop, which
goes on from it. Either way the answer is the LP loop's to within dw's 1e-9
certificates.
`None` (caller: the plain LP loop) where the decomposition does not apply.

A time limit (PolicyOptions.time_limit, the daemon's solver_time_limit_seconds) comes
as the water filling's Deadline (deadline.py, started once per solve and shared with
the LP loop after the path): every HiGHS run of every min_beta solve gets what is left
of it, and once it has passed the path stops with the deadline's SolverError, as the
HiGHS LPs of the other solvers stop at their limit (the round then fails and the last
allocation stands); it does not hand over to the LP loop, which would only take longer.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

import numpy as np

from slurm_gavel.policies.solvers.deadline import NO_DEADLINE, Deadline
from slurm_gavel.policies.solvers.dw import (
    DW_MAX_TYPES,
    NEWTON_MAX_STEPS,
    BetaResult,
    DwStalled,
    beta_bound,
    min_beta,
    vertices,
)
from slurm_gavel.policies.solvers.hier_dw import job_duals
from slurm_gavel.policies.solvers.solve_paths import decomposed, fell_back

#: From this many (class, type) cells on (about 500 distinct jobs on 3 types); below
#: it the LP loop alone is faster, and the simulator's class LPs stay as they were.
DW_MIN_CELLS = 1500

#: A job that cannot rise by this much is bottlenecked (relative; the water filling's
#: LP loop, hier_water_filling, uses the same).
MARGIN = 1e-4
MARGIN_FLOOR = 1e-5  # ... and never less than this (normalised units: 1 = a fair share)
#: Newton stops once beta is within this of 1 (from above).
BETA_TOL = 1e-11
#: A path whose end needs at most this much more than the cluster (beta, relative) fits
#: it: after a crossing the frozen jobs hold the priced types exactly full, and a path
#: on the unpriced ones then reads beta = 1 plus the decomposition's rounding all along
#: (it found a "crossing" at once that proved no job, and the LP loop took over). The
#: levels are scaled by 1 / beta, within the certificates' 1e-9.
FIT_TOL = 1e-9
#: At most this many crossings (each: one path, ~6 min_beta solves); then the LP loop.
MAX_ROUNDS = 50


@dataclass(frozen=True)
class Path:
    """The events of the time-row levels, in order: tau[k] the common level at the
    end of level k + 1, mu[k] (E,) each entity's clock there; per class, the event
    at which it froze (-1: from the start, int64 max: never) and its level then."""

    tau: np.ndarray  # (m,)
    mu: np.ndarray  # (m, E)
    froze_at: np.ndarray  # (C,) int
    final: np.ndarray  # (C,) level at freezing
    entity: np.ndarray  # (C,) entity index
    unit: np.ndarray  # (C,) level per unit of the entity's clock (w / s)
    start: np.ndarray  # (C,) levels when the clocks were at 0

    def at(self, tau: float) -> tuple[np.ndarray, np.ndarray]:
        """(levels (C,), frozen (C,)) at common level tau: the clocks interpolated
        between events (linear there), the classes frozen at events up to tau."""
        k = int(np.searchsorted(self.tau, tau, side="right")) - 1  # last event <= tau
        t0 = float(self.tau[k]) if k >= 0 else 0.0
        mu0 = self.mu[k] if k >= 0 else np.zeros(self.mu.shape[1])
        mu = mu0
        if k + 1 < len(self.tau):
            span = float(self.tau[k + 1]) - t0
            mu = mu0 + ((tau - t0) / span if span > 0 else 0.0) * (self.mu[k + 1] - mu0)
        frozen = self.froze_at <= k
        return np.where(frozen, self.final, self.start + self.unit * mu[self.entity]), frozen


@dataclass(frozen=True)
class Partial:
    """The water filling's state after the crossing: levels, frozen classes, fractions
    x (within the cluster, every class at its level to 1e-9), the first level, the
    number of levels so far, whether every class is frozen, and min_beta solves."""

    level: np.ndarray
    frozen: np.ndarray
    x: np.ndarray
    first_level: float
    iterations: int
    complete: bool
    solves: int


def path(
    maximum: np.ndarray,
    unit: np.ndarray,
    live_weight: np.ndarray,
    entity: np.ndarray,
    entity_weight: np.ndarray,
    frozen: np.ndarray,
    start: np.ndarray,
) -> Path:
    """The time-row events. Class c's level is start_c + unit_c mu_e until it freezes
    at maximum_c; live_weight_c = w_c count_c (its part of S_e); `frozen` at start.

    Each entity's clock is linear in tau between its own changes (mu_e = mu0_e + (tau -
    tau0_e) rate_e, rate_e = W_e / S_e), so an event touches only the entities whose
    classes freeze at it: two heaps hold each entity's next event (its next class
    reaches M) and the tau where that class comes within the margin of M (it freezes
    at the first event from there, as the LP loop freezes every job that cannot rise
    by the margin). With 100 accounts and ~4,000 events the loop over every entity at
    every event took 0.3 s; the clocks at the events are filled in at the end."""
    n_ent = len(entity_weight)
    star = np.where(frozen, 0.0, (maximum - start) / np.where(unit > 0, unit, 1.0))  # mu at M
    # mu beyond which a class is within the margin: level > min(M / (1 + m), M - floor)
    near = np.minimum(maximum / (1.0 + MARGIN), maximum - MARGIN_FLOOR)
    star_m = np.where(frozen, 0.0, (near - start) / np.where(unit > 0, unit, 1.0))
    froze_at = np.where(frozen, -1, np.iinfo(np.int64).max)
    final = np.where(frozen, start, maximum)
    order = [np.nonzero((entity == e) & ~frozen)[0] for e in range(n_ent)]
    order = [o[np.argsort(star[o], kind="stable")] for o in order]
    star_l = [star[o].tolist() for o in order]
    near_l = [star_m[o].tolist() for o in order]
    max_l = [maximum[o].tolist() for o in order]
    unit_l = [unit[o].tolist() for o in order]
    start_l = [start[o].tolist() for o in order]
    lw_l = [live_weight[o].tolist() for o in order]
    nxt = [0] * n_ent
    left = [float(sum(w)) for w in lw_l]
    ew = [float(w) for w in entity_weight]
    # each entity's clock: mu0 at tau0, rising at rate; its segments for the end
    tau0 = [0.0] * n_ent
    mu0 = [0.0] * n_ent
    rate = [0.0] * n_ent  # set by schedule()
    segments: list[list[tuple[float, float, float]]] = [[] for _ in range(n_ent)]
    version = [0] * n_ent
    events: list[tuple[float, int, int]] = []  # (tau of the next class's M, entity, version)
    nears: list[tuple[float, int, int]] = []  # (tau where it comes within the margin, ...)

    def at(e: int, tau: float) -> float:
        return mu0[e] + (tau - tau0[e]) * rate[e]

    def schedule(e: int, tau: float) -> None:
        """Push entity e's next event and margin entry (its clock re-based at tau)."""
        mu0[e], tau0[e] = at(e, tau), tau
        rate[e] = ew[e] / left[e] if left[e] > 0 else 0.0
        segments[e].append((tau, mu0[e], rate[e]))
        version[e] += 1
        i = nxt[e]
        if i < len(order[e]) and left[e] > 0:
            heapq.heappush(events, (tau + max(star_l[e][i] - mu0[e], 0.0) / rate[e], e, version[e]))
            heapq.heappush(nears, (tau + max(near_l[e][i] - mu0[e], 0.0) / rate[e], e, version[e]))

    def freeze(e: int, k: int, tau: float) -> bool:
        """Freeze entity e's classes that cannot rise by the margin at event k."""
        i, mu = nxt[e], at(e, tau)
        while i < len(order[e]):
            lv = min(start_l[e][i] + unit_l[e][i] * mu, max_l[e][i])
            if max_l[e][i] - lv >= max(MARGIN * lv, MARGIN_FLOOR):
                break
            frz.append((int(order[e][i]), k, lv))
            left[e] -= lw_l[e][i]
            i += 1
        changed = i != nxt[e]
        nxt[e] = i
        if i == len(order[e]):
            left[e] = 0.0
        return changed

    for e in range(n_ent):
        schedule(e, 0.0)
    taus: list[float] = []
    frz: list[tuple[int, int, float]] = []  # (class, event, level)
    while events:
        tau, e_hit, ver = heapq.heappop(events)
        if ver != version[e_hit]:
            continue
        if taus:
            tau = max(tau, taus[-1])
        k = len(taus)
        mu0[e_hit], tau0[e_hit] = star_l[e_hit][nxt[e_hit]], tau  # exactly at the event
        touched = {e_hit}
        while nears and nears[0][0] <= tau:
            _, e, ver = heapq.heappop(nears)
            if ver == version[e]:
                touched.add(e)
        for e in sorted(touched):
            freeze(e, k, tau)
            schedule(e, tau)
        taus.append(tau)
    if frz:
        cls, ev, lv = (np.array(v) for v in zip(*frz, strict=True))
        froze_at[cls] = ev
        final[cls] = lv
    t = np.array(taus)
    mus = np.zeros((len(t), n_ent))
    for e in range(n_ent):
        s0, m0, r0 = (np.array(v) for v in zip(*segments[e], strict=True))
        j = np.searchsorted(s0, t, side="right") - 1
        mus[:, e] = m0[j] + (t - s0[j]) * r0[j]
    return Path(t, mus, froze_at, final, entity, unit, start)


def parametric_fill(
    coef: np.ndarray,
    scale: np.ndarray,
    count: np.ndarray,
    weight: np.ndarray,
    entity: np.ndarray,
    entity_weight: np.ndarray,
    capacity: np.ndarray,
    *,
    deadline: Deadline = NO_DEADLINE,
) -> Partial | None:
    """The water filling up to (and usually through) the first level where the capacity
    rows bind; None where the decomposition does not apply (few cells, many types,
    zero weights) or stalls. The deadline's SolverError once it has passed (read
    before each HiGHS run of the min_beta solves)."""
    k = coef.shape[1]
    allowed = coef > 0
    runnable: np.ndarray = np.asarray(allowed.any(axis=1))
    if (
        k > DW_MAX_TYPES
        or int(allowed[runnable].sum()) < DW_MIN_CELLS
        or (weight[runnable] <= 0).any()
        or (entity_weight <= 0).any()
    ):
        return None
    maximum = np.where(allowed, coef, 0.0).max(axis=1, initial=0.0)
    unit = np.where(runnable, weight / scale, 0.0)
    level, frozen = np.zeros(len(coef)), ~runnable
    first: float | None = None
    iterations = solves = 0
    for _ in range(MAX_ROUNDS):
        pth = path(maximum, unit, weight * count, entity, entity_weight, frozen, level)
        try:
            cr = _cross(
                coef, runnable, count * scale, capacity, pth, weight * count, entity_weight,
                deadline,
            )  # fmt: skip
        except DwStalled as e:
            fell_back("hier_path", e.reason, str(e))
            if first is None:
                return None
            break  # the LP loop goes on from the last crossing
        if first is None:  # the LP loop's first level ends at the first event or crossing
            first = float(pth.tau[0]) if len(pth.tau) and pth.tau[0] <= cr.tau else cr.tau
        iterations += cr.events + (0 if cr.full else 1)
        solves += cr.solves
        level, frozen, x = cr.level, cr.frozen, cr.x
        # Caps only come down: each one is proven at its own crossing's prices while
        # every unfrozen job stays within every cap it was given (_free_caps).
        maximum = np.minimum(maximum, cr.cap)
        if frozen.all() or cr.proven == 0:
            break
    assert first is not None
    decomposed("hier_path")
    return Partial(level, frozen, x, first, iterations, bool(frozen.all()), solves)


@dataclass(frozen=True)
class _Crossing:
    level: np.ndarray
    frozen: np.ndarray
    x: np.ndarray
    tau: float  # where the path stopped fitting (its end if it never did)
    events: int  # path events up to tau
    full: bool  # every class reached its maximum within the cluster
    proven: int  # classes proven bottlenecked at the crossing
    solves: int
    cap: np.ndarray  # (C,) where each unfrozen class is proven bottlenecked (inf: not known)


def _cross(
    coef: np.ndarray,
    runnable: np.ndarray,
    gpus: np.ndarray,
    cap: np.ndarray,
    pth: Path,
    live_weight: np.ndarray,
    entity_weight: np.ndarray,
    deadline: Deadline = NO_DEADLINE,
) -> _Crossing:
    """Where the path's levels stop fitting the cluster (module docstring); every
    HiGHS run within `deadline`."""
    n, k = coef.shape
    allowed = coef > 0
    a, al, g = coef[runnable], allowed[runnable], gpus[runnable]
    maximum = np.where(allowed, coef, 0.0).max(axis=1, initial=0.0)
    lam: np.ndarray | None = None

    def rise_at(frozen: np.ndarray) -> np.ndarray:
        left = np.bincount(pth.entity, np.where(frozen, 0.0, live_weight), len(entity_weight))
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(frozen, 0.0, pth.unit * entity_weight[pth.entity] / left[pth.entity])

    def beta(tau: float) -> tuple[BetaResult, np.ndarray, np.ndarray]:
        nonlocal lam
        level, frozen = pth.at(tau)
        w = np.minimum(level, maximum)[runnable]
        rise = rise_at(frozen | ~runnable)[runnable]
        res = min_beta(vertices(a, al, w), g, cap, dw=rise, lam0=lam, deadline=deadline)
        lam = res.lam
        return res, np.minimum(level, maximum), frozen | ~runnable

    def fractions(res: BetaResult) -> np.ndarray:
        x = np.zeros((n, k))  # scaled by 1 / beta (beta > 1) it fits the cluster
        x[runnable] = np.clip(res.x / max(res.beta, 1.0), 0.0, 1.0)
        return x

    end = float(pth.tau[-1]) if len(pth.tau) else 0.0
    no_cap = np.full(n, np.inf)
    # Does the path's end fit? The master's bound first: far from fitting it says so
    # and gives the prices for the root below without a restricted LP (min_beta far
    # above the crossing can be slow).
    level, frozen = pth.at(end)
    lower, lam_end = beta_bound(
        vertices(a, al, np.minimum(level, maximum)[runnable]), g, cap, lam, deadline
    )
    solves = 1
    if lower <= 1.0 + FIT_TOL:
        res, level, frozen = beta(end)
        solves += 1
        if res.beta <= 1.0 + FIT_TOL:  # every job reaches its maximum (or its cap)
            level = level / max(res.beta, 1.0)
            x = fractions(res)
            return _Crossing(level, frozen, x, end, len(pth.tau), True, 0, solves, no_cap)
        lam_end = res.lam
    # safeguarded Newton on beta(tau) = 1: beta rises with tau, convex between events.
    # It starts where the Lagrangian bound at the end's prices reaches 1 (an upper
    # bound on the crossing, cheap: no LP).
    lo, hi = 0.0, end
    tau = _bound_root(pth, a, al, g, cap, runnable, maximum, lam_end, hi)
    res, level, frozen = beta(tau)
    solves += 1
    # The target is a hair above 1: after a crossing the frozen jobs hold the priced
    # types exactly full, so beta reads 1 (to rounding) from the path's start until a
    # type that was free binds; a root of beta = 1 could then be anywhere on that flat
    # stretch, with prices that do not price the type about to bind (it proved no job,
    # and the LP loop took over). Just past the stretch's end both are right.
    target = 1.0 + 2 * BETA_TOL
    while abs(res.beta - target) > BETA_TOL:
        if res.beta > target:
            hi = tau
        else:
            lo = tau
        if hi - lo <= 1e-14 * hi or solves >= NEWTON_MAX_STEPS:
            raise DwStalled("crossing_not_found", "hierarchical path: the crossing was not found")
        step = tau - (res.beta - target) / res.slope if res.slope > 0 else np.nan
        tau = step if lo < step < hi else 0.5 * (lo + hi)
        res, level, frozen = beta(tau)
        solves += 1
    level = level / max(res.beta, 1.0)
    x = fractions(res)
    assert lam is not None
    best = _proof(a, al, g, lam, level, frozen, runnable)
    if best is None:
        raise DwStalled("no_dual", "hierarchical path: no dual at the crossing")
    proven, prices, gap = best
    events = int(np.searchsorted(pth.tau, tau, side="right"))
    cap = no_cap.copy()
    unproven = (~frozen & ~proven)[runnable]
    cap[runnable] = _free_caps(a, al, g, prices, level[runnable], unproven, gap)
    return _Crossing(level, frozen | proven, x, tau, events, False, int(proven.sum()), solves, cap)


def _proof(
    a: np.ndarray,
    allowed: np.ndarray,
    g: np.ndarray,
    prices: np.ndarray,
    level: np.ndarray,
    frozen: np.ndarray,
    runnable: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, float] | None:
    """(proven (C,), the prices, gap) at the crossing's levels: the unfrozen classes
    that y_j margin_j > gap proves bottlenecked (module docstring); None: no dual."""
    found = job_duals(a, allowed, g[:, None] * prices[None, :], level[runnable], largest_y=True)
    if found is None:
        return None
    y_r, _, cost = found
    gap = max(1.0 - float(cost.sum()), 0.0) + 1e-12
    y = np.zeros(len(level))
    y[runnable] = y_r
    return ~frozen & (y * np.maximum(MARGIN * level, MARGIN_FLOOR) > gap), prices, gap


def _free_caps(
    a: np.ndarray,
    allowed: np.ndarray,
    g: np.ndarray,
    lam: np.ndarray,
    level: np.ndarray,
    unproven: np.ndarray,
    gap: float,
) -> np.ndarray:
    """Per job (runnable rows), the level at which the crossing's prices prove it
    bottlenecked once it gets there, or inf.

    At the crossing sum_j C_j(V_j) = 1 - gap at prices lam (lam . cap = 1). An unproven
    job costs nothing there (y_j = 0: it reaches its level on the types whose price is
    0, with time to spare), and it goes on costing nothing up to F_j, all the time on
    its best unpriced type. While every unfrozen job stays at or below its F_j the sum
    stays 1 - gap, so a job at F_j with y_j margin_j > gap cannot rise: the same proof
    as at the crossing, with the same prices. Without these caps, where one GPU type
    is so plentiful that its price is 0, the jobs left rose again towards their
    maxima on the priced types and each new crossing proved about one of them (the LP
    loop's levels, one at a time: 10,000 jobs did not finish). A cap is kept only where
    the job costs nothing now and its proof at F_j holds."""
    n = len(a)
    free = allowed & (lam <= 0.0)[None, :]
    best_free = np.where(free, a, 0.0).max(axis=1, initial=0.0)
    cap = np.full(n, np.inf)
    pick = unproven & (best_free > 0) & (best_free >= level)
    if not pick.any():
        return cap
    price = g[:, None] * lam[None, :]
    now = job_duals(a[pick], allowed[pick], price[pick], level[pick])
    there = job_duals(a[pick], allowed[pick], price[pick], best_free[pick], largest_y=True)
    if now is None or there is None:
        return cap
    scale_ = float(price.max()) or 1.0
    y_there, _, cost_there = there
    holds = (
        (np.abs(now[2]) <= 1e-12 * scale_)
        & (np.abs(cost_there) <= 1e-12 * scale_)
        & (y_there * np.maximum(MARGIN * best_free[pick], MARGIN_FLOOR) > gap)
    )
    idx = np.nonzero(pick)[0][holds]
    cap[idx] = best_free[idx]
    return cap


def _bound_root(
    pth: Path,
    a: np.ndarray,
    allowed: np.ndarray,
    g: np.ndarray,
    cap: np.ndarray,
    runnable: np.ndarray,
    maximum: np.ndarray,
    lam: np.ndarray,
    hi: float,
) -> float:
    """The tau in [0, hi] where sum_j C_j(L_j(tau); lam) / lam . cap (a lower bound on
    beta(L(tau)), rising with tau) reaches 1, by bisection to 1e-6 of hi: the crossing
    is at or below it."""
    price = g[:, None] * lam[None, :]
    total = float(lam @ cap)
    lo = 0.0
    for _ in range(20):
        mid = 0.5 * (lo + hi)
        level = np.minimum(pth.at(mid)[0], maximum)[runnable]
        found = job_duals(a, allowed, price, level)
        if found is not None and float(found[2].sum()) > total:
            hi = mid
        else:
            lo = mid
    return hi
