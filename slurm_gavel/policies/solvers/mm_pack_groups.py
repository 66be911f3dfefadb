"""The packed max-min LP with pair time aggregated per job and partner *group*, exactly.

A pair's throughputs depend only on the two jobs' job types and scale factor (the
pair table), never on the jobs themselves. So instead of one column per job pair
and GPU type (889k at 1,024 distinct jobs), each class c gets one column per
partner group b = (job type, scale) and GPU type t (built in mm_group_columns.py):

* Y[c, b, t]  time each job of c spends paired with some job of group b on type t

worth factor_c * r_ab(t) per unit to c's job (its side of the pair rate; the same
normalisation as mm_pairs.class_pair_vars) and occupying s/2 GPUs of t per unit
(each pair is counted from both of its sides). Which concrete partners give that
time is a transport problem, and any marginals are realisable:

* a != b: one row per (a, b, t), sum_{c in a} n_c Y[c,b,t] = sum_{d in b} n_d Y[d,a,t]
  (the pair time seen from both sides). Any two jobs of a and b may pair on t when
  both may run on t, so the north-west-corner rule turns the marginals into at most
  |a| + |b| - 1 job pairs with exactly those times.
* a == b: pairs inside one group. Degrees d_j (a job's paired time) are realisable
  by pairs of two *different* jobs iff max_j d_j <= D / 2, D = sum_j d_j (lay the
  degrees end to end on a circle of length D and pair each point x with x + D/2).
  Those rows are added only when violated (row generation): the LP without them is
  a relaxation, so once its optimum satisfies them it is the optimum.

So the LP has the same optimum as the job-pair LP (same value of the max-min and
of stage 2), with (classes x groups x types) columns instead of (classes^2 x
types). Used for many classes (GROUP_MIN_CLASSES); the class-pair path of mm_lp.py
stays for fewer, so the simulator's small class LPs keep their vertex bit for bit.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

import highspy
import numpy as np

from slurm_gavel.domain.model import GpuType, JobId, PairShare, Problem
from slurm_gavel.policies.solvers.classes import JobClasses, capacity_share_throughput
from slurm_gavel.policies.solvers.deadline import Deadline
from slurm_gavel.policies.solvers.lp import SolverError
from slurm_gavel.policies.solvers.mm_group_columns import (
    GroupColumns,
    group_pair_columns,
    partner_groups,
)
from slurm_gavel.policies.solvers.mm_pricing import PricedLp

# From this many classes on, max_min_fairness_packed solves this LP instead of the
# class-pair LP. Distinct jobs (jitter 0.2), CPU s class-pair / this (with _hint),
# same process, alternating, load ~5: 256 jobs 0.22-0.33 / 0.22; 512 jobs 0.96-1.16 /
# 0.40-0.41; 1,024 jobs: benchmarks/README.md. The simulator's class LPs are far
# below it, so their vertex stays bit for bit.
GROUP_MIN_CLASSES = 250
STAGE2_SLACK = 1e-9  # as mm_lp.STAGE2_SLACK
EPS = 1e-12  # below this, pair time is solver noise
_DEGREE_TOL = 1e-9
# Pair columns enter by pricing (mm_pricing.py), this many per round: all 70k at once
# take 34 s of dual simplex (37k iterations; IPM 5.6 s + 2 s), 500/1,000/3,000 per
# round 4.7/4.3/7.4 s at 1,024 distinct jobs (load ~4.5). Starting each job with its
# best partner group per type, or adding each job's best column per round: no gain.
PRICING_BATCH = 1000
# Start from the partner-group cells the LP of group-mean rows uses (_hint): 1,024
# distinct jobs 2.3-2.5 -> 1.4-1.5 CPU s (alternating, load ~9). Only a start.
HINT = True
# How HiGHS solves it (mm_pricing.PricedLp): the first, hinted LP (~5.5k columns,
# ~4.2k rows) by interior point + crossover, each re-solve after priced-in columns
# (and stage 2's new cost) by primal simplex from the basis, after degree rows by
# dual simplex. 1,024 distinct jobs, CPU s, same process, load ~0.5: dual simplex
# throughout 1.46-1.55; IPM first 1.13-1.25; IPM first + primal re-solves
# 0.77-0.87 (stage 2 from 2.2k dual pivots to a handful of primal ones). The same
# optimum (the pricing still runs until no column improves): benchmarks/README.md.
FIRST_SOLVER = "ipm"
RESOLVE = "primal"


@dataclass(frozen=True)
class GroupSolution:
    x: np.ndarray  # (C, K) per-job fractions alone
    pairs: list[PairShare]
    value: np.ndarray  # (C,) per-job normalised throughput
    objective: float
    runnable: np.ndarray  # (C,) bool


def solve_packed_groups(
    problem: Problem,
    classes: JobClasses,
    coef: np.ndarray,
    *,
    second_stage: bool = True,
    time_limit: float | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> GroupSolution:
    """Two-stage packed max-min over classes and partner groups; see the module docstring.
    `time_limit` covers the hint's LP and the main LP together (one Deadline, on `clock`,
    read only with a limit; past it the deadline's SolverError)."""
    import scipy.sparse as sp

    deadline = Deadline.after(time_limit, "packed max-min", clock)
    n_cls, n_types = coef.shape
    allowed = classes.allowed()
    count = classes.count.astype(np.float64)
    scale = classes.scale.astype(np.float64)
    norm = classes.weight * capacity_share_throughput(classes.throughput, classes.capacity)
    factor = classes.scale / np.where(norm > 0, norm, np.inf)
    group, keys = partner_groups(classes)
    p, n_cons = group_pair_columns(problem, classes, group, keys, factor)
    xc, xt = np.nonzero(allowed)
    nx, ny = len(xc), len(p.c)
    zcol = nx + ny
    runnable = np.zeros(n_cls, dtype=bool)
    runnable[xc] = True
    runnable[p.c] = True
    if not runnable.any():
        z = np.zeros(n_cls)
        return GroupSolution(np.zeros((n_cls, n_types)), [], z, 0.0, runnable)
    fair = np.cumsum(runnable) - 1
    n_fair = int(runnable.sum())
    b2, b3 = n_fair, n_fair + n_cls
    b4 = b3 + n_types
    ycol = nx + np.arange(ny)
    inner = p.row >= 0
    rows = np.concatenate(
        [fair[xc], fair[p.c], np.arange(n_fair), b2 + xc, b2 + p.c, b3 + xt, b3 + p.t,
         b4 + p.row[inner]]
    )  # fmt: skip
    cols = np.concatenate(
        [np.arange(nx), ycol, np.full(n_fair, zcol), np.arange(nx), ycol, np.arange(nx), ycol,
         ycol[inner]]
    )  # fmt: skip
    vals = np.concatenate(
        [-coef[xc, xt], -p.gain, np.ones(n_fair), np.ones(nx), np.ones(ny),
         count[xc] * scale[xc], count[p.c] * scale[p.c] / 2, (p.sign * count[p.c])[inner]]
    )  # fmt: skip
    n_rows = b4 + n_cons
    a = sp.csc_matrix((vals, (rows, cols)), shape=(n_rows, zcol + 1))
    lower = np.concatenate([np.full(b4, -highspy.kHighsInf), np.zeros(n_cons)])
    upper = np.concatenate(
        [np.zeros(n_fair), np.ones(n_cls), classes.capacity.astype(np.float64), np.zeros(n_cons)]
    )
    cost = np.zeros(zcol + 1)
    cost[zcol] = 1.0
    active = np.ones(zcol + 1, dtype=bool)
    active[nx:zcol] = False  # pair columns come in by pricing
    if HINT:
        active[nx:zcol] = _hint(problem, group, keys, p, deadline)
    lp = PricedLp(
        a, lower, upper, np.full(zcol + 1, highspy.kHighsInf), cost, active,
        solver=FIRST_SOLVER, time_limit=deadline.check(), batch=PRICING_BATCH, resolve=RESOLVE,
    )  # fmt: skip
    degree = _DegreeRows(lp, p, count, nx, group)
    sol = degree.solve("packed max-min stage 1")
    if second_stage:
        lp.set_lower(zcol, max(float(sol[zcol]) * (1 - STAGE2_SLACK), 0.0))
        cost2 = np.zeros(zcol + 1)
        cost2[:nx] = count[xc] * coef[xc, xt]
        cost2[nx:zcol] = count[p.c] * p.gain
        lp.set_cost(cost2)
        with contextlib.suppress(SolverError):  # stage 2 improves, never required
            sol = degree.solve("packed max-min stage 2")
    x = np.zeros((n_cls, n_types))
    x[xc, xt] = np.clip(sol[:nx], 0.0, 1.0)
    y = np.clip(sol[nx:zcol], 0.0, None)
    value = (coef * x).sum(axis=1)
    np.add.at(value, p.c, p.gain * y)
    shares = _pair_shares(problem, classes, p, y, group)
    return GroupSolution(x, shares, value, float(value[runnable].min()), runnable)


def _hint(
    problem: Problem,
    group: np.ndarray,
    keys: list[tuple[str, int]],
    p: GroupColumns,
    deadline: Deadline,
) -> np.ndarray:
    """Pair columns to start from: the (group, partner group, type) cells that the
    class-pair LP uses when every job has its group's mean row (few classes, fast).
    Only a start: pricing still brings in every column that improves. Its LP runs in
    what is left of `deadline`."""
    from slurm_gavel.policies.solvers.classes import fairness_coefficients, group_jobs
    from slurm_gavel.policies.solvers.mm_lp import solve_max_min_classes
    from slurm_gavel.policies.solvers.mm_pairs import class_pair_vars

    index = {k: g for g, k in enumerate(keys)}
    of_job = np.array([index[(j.job_type, j.scale_factor)] for j in problem.jobs])
    types = list(problem.cluster)
    rows = np.array([[j.throughput.get(t, 0.0) for t in types] for j in problem.jobs])
    mean = np.zeros((len(keys), len(types)))
    np.add.at(mean, of_job, rows)
    mean /= np.maximum(np.bincount(of_job, minlength=len(keys)), 1)[:, None]
    jobs = tuple(
        replace(j, throughput=dict(zip(types, map(float, mean[g]), strict=True)))
        for j, g in zip(problem.jobs, of_job, strict=True)
    )
    avg = replace(problem, jobs=jobs)
    cl = group_jobs(avg, by_job_type=True)
    coef = fairness_coefficients(cl, cl.throughput)
    pairs = class_pair_vars(avg, cl, cl.throughput)
    try:
        sol = solve_max_min_classes(
            coef, cl.allowed(), cl.scale, cl.count, cl.capacity, pairs,
            second_stage=False, time_limit=deadline.check(),
        )  # fmt: skip
    except SolverError as err:
        if deadline.remaining() == 0.0:  # HiGHS stopped at the limit: say so, and the fix
            raise deadline.reached() from err
        raise
    gof = np.array([index[(cl.job_type[c], int(cl.scale[c]))] for c in range(cl.n_classes)])
    k = len(keys) * len(cl.types)
    used = np.zeros(len(keys) * k, dtype=bool)
    on = sol.y > EPS
    ga, gb, t = gof[pairs.c[on]], gof[pairs.d[on]], pairs.t[on]
    used[ga * k + gb * len(cl.types) + t] = True
    used[gb * k + ga * len(cl.types) + t] = True
    return used[group[p.c] * k + p.b * len(cl.types) + p.t]


class _DegreeRows:
    """Adds max-degree rows (d_c <= D/2 within one group and type) while violated."""

    def __init__(
        self, lp: PricedLp, p: GroupColumns, count: np.ndarray, nx: int, group: np.ndarray
    ) -> None:
        self.lp, self.p, self.count, self.nx = lp, p, count, nx
        inner = np.nonzero(p.row < 0)[0]
        keys = group[p.c[inner]] * (int(p.t.max(initial=0)) + 1) + p.t[inner]
        self.blocks = [inner[keys == k] for k in np.unique(keys)]
        self.added: set[int] = set()

    def solve(self, what: str) -> np.ndarray:
        while True:
            sol = self.lp.solve(what)
            if not self._add_violated(sol[self.nx :]):
                return sol

    def _add_violated(self, y: np.ndarray) -> bool:
        added = False
        for cols in self.blocks:
            d = y[cols]
            total = float((self.count[self.p.c[cols]] * d).sum())
            for i in np.nonzero(d > total / 2 + _DEGREE_TOL)[0]:
                col = int(cols[i])
                if col in self.added:
                    continue
                self.added.add(col)
                coeff = -self.count[self.p.c[cols]] / 2
                coeff[i] += 1.0
                self.lp.add_row(self.nx + cols, coeff, -highspy.kHighsInf, 0.0)
                added = True
        return added


def _pair_shares(
    problem: Problem, classes: JobClasses, p: GroupColumns, y: np.ndarray, group: np.ndarray
) -> list[PairShare]:
    """Concrete job pairs for the per-job pair times y (see the module docstring)."""
    ids = [job.id for job in problem.jobs]
    out: dict[tuple[JobId, JobId], dict[GpuType, float]] = {}

    def add(i: int, j: int, k: int, v: float) -> None:
        if i == j or v <= EPS:
            return
        a, b = ids[i], ids[j]
        key = (a, b) if (b, a) not in out else (b, a)
        per = out.setdefault(key, {})
        t = classes.types[k]
        per[t] = per.get(t, 0.0) + v

    def jobs_of(cols: np.ndarray) -> tuple[list[int], list[float]]:
        who: list[int] = []
        amount: list[float] = []
        for q in cols:
            if y[q] > EPS:
                for m in classes.members[int(p.c[q])]:
                    who.append(m)
                    amount.append(float(y[q]))
        return who, amount

    cross = np.nonzero(p.row >= 0)[0]
    cross = cross[np.argsort(p.row[cross], kind="stable")]  # by row, columns ascending
    starts = np.flatnonzero(np.diff(p.row[cross], prepend=-1))
    for cols in np.split(cross, starts[1:]) if len(cross) else []:
        k = int(p.t[cols[0]])
        src, supply = jobs_of(cols[p.sign[cols] > 0])
        dst, demand = jobs_of(cols[p.sign[cols] < 0])
        i = j = 0
        while i < len(src) and j < len(dst):
            moved = min(supply[i], demand[j])
            add(src[i], dst[j], k, moved)
            supply[i] -= moved
            demand[j] -= moved
            if supply[i] <= EPS:
                i += 1
            if demand[j] <= EPS:
                j += 1
    inner = np.nonzero(p.row < 0)[0]
    keys = group[p.c[inner]] * (int(p.t.max(initial=0)) + 1) + p.t[inner]
    for key in np.unique(keys):
        cols = inner[keys == key]
        who, deg = jobs_of(cols)
        for i, j, v in _circle_pairs(deg):
            add(who[i], who[j], int(p.t[cols[0]]), v)
    return [PairShare(k, v) for k, v in out.items()]


def _circle_pairs(degree: list[float]) -> list[tuple[int, int, float]]:
    """Pairs (i, j, time) of different jobs with job i in pairs for degree[i] in all.

    The degrees lie end to end on a circle of length D; the point x pairs with
    x + D/2, so a job is never its own partner while its degree is <= D/2.
    """
    total = float(sum(degree))
    if total <= EPS:
        return []
    half = total / 2
    ends = np.cumsum(degree)
    out: list[tuple[int, int, float]] = []
    i = 0
    j = int(np.searchsorted(ends, half, side="right"))
    x = 0.0
    n = len(degree)
    while x < half - EPS and i < n and j < n:
        step = min(ends[i] - x, ends[j] - (x + half))
        if step > EPS:
            out.append((i, j, float(step)))
        x += max(step, 0.0)
        if ends[i] - x <= EPS:
            i += 1
        if ends[j] - (x + half) <= EPS:
            j += 1
    return out
