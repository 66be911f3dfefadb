"""The first water-filling level of hierarchical max-min fairness by decomposition (dw.py).

With per-job rows every job is its own class and the first level LP

    max c  s.t.  coef_j . x_j >= c r_j (y_j),  sum_t x_jt <= 1 (u_j),
                 sum_j g_j x_jt <= cap_t (lam_t)

(r_j: the job's rise, its effective weight over its scale factor) costs HiGHS
~1.2 s at 10,000 jobs (IPM + crossover). Dividing each value row by r_j makes it
stage 1 of max-min fairness, which dw.max_min solves exactly (certified to 1e-9).

Water filling also needs the level LP's duals: a job whose value row has a
positive dual in some optimal dual solution cannot rise without another job
falling (complementary slackness), so it is bottlenecked. They come from the
capacity prices lam of the decomposition: at fixed lam each job's own LP
min g_j lam . x s.t. a_j . x >= c*, sum x <= 1 has the dual
max c* y - u s.t. a_jt y - u <= g_j lam_t, y, u >= 0, whose optimum is one of
seven candidate points for three types ((0, 0), one type's, two types'); the
best feasible one is taken per job, and all are scaled so that sum_j y_j r_j = 1
(the c column). The result is checked, not trusted: dual feasibility on every
(job, type) cell to 1e-9 relative and the dual objective within 1e-9 of c*.
If the check fails (or the decomposition stalls) None is returned and the
caller solves the level LP in HiGHS as before. It fails, for one, when GPUs are
plentiful: then the level is set by jobs' own time rows (each alone on its best
type), the capacity prices are 0 and the duals are not of this form.

Every HiGHS run of the decomposition gets what is left of the caller's Deadline (the
water filling's, started once per solve); past it, dw's SolverError, not None (the
level LP would only take longer).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from slurm_gavel.policies.solvers.deadline import NO_DEADLINE, Deadline
from slurm_gavel.policies.solvers.dw import DW_MAX_TYPES, DwStalled, max_min
from slurm_gavel.policies.solvers.solve_paths import decomposed, fell_back

#: From this many (class, type) cells on; below it HiGHS's level LP as before.
DW_MIN_CELLS = 6000
CERT_TOL = 1e-9


def first_level(
    coef: np.ndarray,
    gpus: np.ndarray,
    cap: np.ndarray,
    rise: np.ndarray,
    live: np.ndarray,
    margin: Callable[[np.ndarray], np.ndarray],
    deadline: Deadline = NO_DEADLINE,
) -> tuple[float, np.ndarray, np.ndarray] | None:
    """(c*, x (C, K), y (C,)) or None. y_j > 0 only where the certified dual *proves*
    that class j cannot rise by margin(level)_j (its level after this one) with every
    other class held at its level: for any allocation that keeps every row at c* and
    lifts j by delta, weak duality gives y_j delta <= dual objective - c*, so
    y_j margin_j > that gap rules the lift out. The others get y_j = 0 and go to the
    caller's bottleneck LP.

    `live`: the classes in the level (runnable, rise > 0); the others get no time.
    `gpus`: GPUs per unit of x of each class (count times scale factor). `deadline`:
    every HiGHS run within it (SolverError past it)."""
    n, k = coef.shape
    allowed = coef > 0
    if k > DW_MAX_TYPES or int(allowed[live].sum()) < DW_MIN_CELLS:
        return None
    a = coef[live] / rise[live][:, None]
    try:
        first = max_min(a, allowed[live], gpus[live], cap, deadline)
    except DwStalled as e:
        fell_back("hier_first_level", e.reason, str(e))
        return None
    z, xl, lam = first.z, first.x, first.lam
    cert = _certified_duals(a, allowed[live], gpus[live], cap, z, lam)
    if cert is None:
        # Expected where GPUs are plentiful (the module docstring): capacity prices 0.
        fell_back(
            "hier_first_level", "no_dual",
            "the capacity prices give no job duals that pass the check", expected=True,
        )  # fmt: skip
        return None
    decomposed("hier_first_level")
    y, gap = cert
    r = rise[live]
    lift = margin(z * r) / r  # the margin in the scaled rows' units (value / r_j)
    proven = y * lift > gap
    x = np.zeros((n, k))
    x[live] = xl
    out = np.zeros(n)
    out[live] = np.where(proven, y / r, 0.0)  # back to the rows with coefficient r_j
    return z, x, out


def _certified_duals(
    a: np.ndarray, allowed: np.ndarray, g: np.ndarray, cap: np.ndarray, z: float, lam: np.ndarray
) -> tuple[np.ndarray, float] | None:
    """(per-job y of the scaled level LP (rows a_j . x >= c) from the prices lam, the
    dual objective's excess over z), or None if (lam, y, u) is not an optimal dual to
    CERT_TOL (module docstring)."""
    found = job_duals(a, allowed, g[:, None] * lam[None, :], np.full(a.shape[0], z))
    if found is None:
        return None
    y, u, _ = found
    total = float(y.sum())
    if total <= 0:
        return None
    # scaled so that sum_j y_j = 1 (the c column); the dual objective must equal z
    dual_obj = (float(u.sum()) + float(lam @ cap)) / total
    if abs(dual_obj - z) > CERT_TOL * max(abs(z), 1.0) * 10:
        return None
    return y / total, max(dual_obj - z, 0.0) + 1e-12 * abs(z)


def job_duals(
    a: np.ndarray,
    allowed: np.ndarray,
    price: np.ndarray,
    target: np.ndarray,
    *,
    largest_y: bool = False,
) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """Each job's own dual at capacity prices: max target_j y - u s.t. a_jt y - u <=
    price_jt on its allowed types, y, u >= 0 (the dual of min price_j . x s.t. a_j . x >=
    target_j, sum_t x_t <= 1). Its optimum is one of the candidate points (0, 0), one
    type's (y = price_t / a_t) or two types' (both constraints tight); the best feasible
    one per job: (y, u, objective = the job's least cost of its target), or None if a
    job has no feasible candidate (CERT_TOL). largest_y: among candidates within 1e-12
    (relative to the prices) of the best, the one with the largest y (at a kink of the
    job's cost the duals form a range; the largest proves the most), and its own
    objective."""
    n, k = a.shape
    cand_y = [np.zeros(n)]
    cand_u = [np.zeros(n)]
    for t in range(k):
        cand_y.append(np.where(allowed[:, t], price[:, t] / np.where(allowed[:, t], a[:, t], 1), 0))
        cand_u.append(np.zeros(n))
        for s in range(t + 1, k):
            both = allowed[:, t] & allowed[:, s] & (a[:, t] != a[:, s])
            diff = np.where(both, a[:, t] - a[:, s], 1.0)
            yy = np.where(both, (price[:, t] - price[:, s]) / diff, 0.0)
            cand_y.append(yy)
            cand_u.append(np.where(both, yy * a[:, t] - price[:, t], 0.0))
    ys, us = np.stack(cand_y, axis=1), np.stack(cand_u, axis=1)  # (N, M)
    scale_ = float(price.max()) or 1.0
    tol = CERT_TOL * scale_
    # feasible: y, u >= 0 and a_t y - u <= price_t on every allowed type
    a0 = np.where(allowed, a, 0.0)
    slack = price[:, None, :] - (ys[:, :, None] * a0[:, None, :] - us[:, :, None])
    ok = (ys >= 0) & (us >= -tol) & (np.where(allowed[:, None, :], slack, 0) >= -tol).all(axis=2)
    obj = np.where(ok, target[:, None] * ys - us, -np.inf)
    best = np.argmax(obj, axis=1)
    rows = np.arange(n)
    if not np.isfinite(obj[rows, best]).all():
        return None
    if largest_y:
        near = obj >= obj[rows, best][:, None] - 1e-12 * scale_
        best = np.argmax(np.where(near, ys, -np.inf), axis=1)
    return ys[rows, best], np.maximum(us[rows, best], 0.0), obj[rows, best]
