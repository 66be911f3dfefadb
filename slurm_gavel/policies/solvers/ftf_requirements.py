"""Per-job throughput requirements on top of a class of identical jobs, exactly.

The deadline policies (finish_time_fairness, min_total_duration, min_cost with
SLOs) ask every job j for a rate  sum_t T_t x_jt >= w_j  with sum_t x_jt <= 1.
Jobs of one class share the row T but not w_j, so the per-job LP has N x K
variables (6 s for 10,000 jobs in HiGHS). This module replaces it by an exact
class-level description.

Let X_t be the class's total time on type t. Sort the class's time by speed (a
"speed line": X_1 units at the fastest speed, then X_2 at the next, ...) and let
F(k) be the work the fastest k units do. Per-job fractions meeting every w_j
exist iff for every k the k largest requirements sum to at most F(k) (the
preemptive uniform-machines condition of Horvath, Lam and Sethi, here with
fractional machine counts). Writing F(k) through LP duality turns the condition
into one linear row per distinct speed lambda of the class:

    sum_t (T_t - lambda)^+ X_t  >=  psi_lambda = sum_j (w_j - lambda)^+

(lambda = the fastest speed gives 0 >= sum_j (w_j - T_max)^+: every job must
fit on its fastest type alone, a check on w, not a row). Necessity: for any
lambda >= 0, sum_t (T_t - lambda)^+ x_jt >= w_j - lambda sum_t x_jt >= w_j - lambda.
Sufficiency is constructive: `split_class` hands every job a unit window of the
speed line and keeps the condition true for the jobs left (proof in its
docstring), so an LP over X with these rows loses nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# A segment shorter than this is numerically empty.
_TINY = 1e-13


@dataclass(frozen=True)
class RequirementRows:
    """The rows  sum_t coef[r, t] X[class_of_row[r], t] >= psi_r  for every class."""

    row_class: np.ndarray  # (R,) class of each row
    row_lambda: np.ndarray  # (R,) the row's lambda
    coef: np.ndarray  # (R, K) (T_ct - lambda)^+
    job_rows: np.ndarray  # (N, S) rows of each job's class, -1 padded (jobs in no class: -1)
    job_lambdas: np.ndarray  # (N, S) the matching lambdas (+inf where padded)
    class_max: np.ndarray  # (C,) fastest speed of each class

    def psi(self, w: np.ndarray) -> np.ndarray:
        """(R,) sum over the row's class of (w_j - lambda)^+."""
        gap = np.maximum(w[:, None] - self.job_lambdas, 0.0)
        ok = self.job_rows >= 0
        return np.bincount(self.job_rows[ok], weights=gap[ok], minlength=len(self.row_class))

    def dpsi(self, w: np.ndarray, dw: np.ndarray) -> np.ndarray:
        """(R,) derivative of psi when w moves by dw per unit of the parameter."""
        ok = (self.job_rows >= 0) & (w[:, None] > self.job_lambdas)
        contrib = np.broadcast_to(dw[:, None], ok.shape)
        return np.bincount(self.job_rows[ok], weights=contrib[ok], minlength=len(self.row_class))


def requirement_rows(class_tput: np.ndarray, job_class: np.ndarray) -> RequirementRows:
    """Rows for classes with rows `class_tput` (C, K); `job_class` (N,) maps jobs (-1: none)."""
    n_cls, n_types = class_tput.shape
    row_class: list[int] = []
    row_lambda: list[float] = []
    per_class: list[list[int]] = []
    for c in range(n_cls):
        speeds = np.unique(class_tput[c][class_tput[c] > 0])[::-1]  # distinct, descending
        mine = []
        for lam in [*speeds[1:].tolist(), 0.0]:
            mine.append(len(row_class))
            row_class.append(c)
            row_lambda.append(lam)
        per_class.append(mine)
    rc = np.array(row_class, dtype=np.int64)
    rl = np.array(row_lambda, dtype=np.float64)
    coef = np.maximum(class_tput[rc] - rl[:, None], 0.0) if len(rc) else np.zeros((0, n_types))
    width = max((len(m) for m in per_class), default=0)
    table = np.full((n_cls + 1, max(width, 1)), -1, dtype=np.int64)  # last row: "no class"
    for c, mine in enumerate(per_class):
        table[c, : len(mine)] = mine
    job_rows = table[np.where(job_class >= 0, job_class, n_cls)]
    job_lambdas = np.where(job_rows >= 0, rl[np.maximum(job_rows, 0)] if len(rl) else 0, np.inf)
    class_max = class_tput.max(axis=1, initial=0.0)
    return RequirementRows(rc, rl, coef, job_rows, job_lambdas, class_max)


def split_class(speeds: np.ndarray, pool: np.ndarray, need: np.ndarray) -> np.ndarray:
    """Per-job fractions (n, K) from a class's pooled time `pool` (K,) meeting `need` (n,).

    Works on the speed line (time sorted by speed, padded with idle time up to n
    units). Jobs go in ascending order of need; each takes the unit window
    [u, u+1] with the largest u whose work G(u) >= need (the slowest window that
    suffices; the last unit when even that is enough), and the window is cut out
    of the line.

    Why the rest stays feasible: let w be the smallest need, S_k the sum of the k
    largest needs, F(k) the work of the fastest k units. After the cut, F'(k) =
    F(k) for k <= u, and F'(k) = F(k + 1) - G(u) for k > u, where G(u) = w unless
    u is the last unit (then no k > u is left to check). For k <= u the others'
    S_k stays within F(k) (unchanged); for k > u, S_{k+1} <= F(k+1) and the
    (k+1)-th largest need is >= w give S_k <= F(k+1) - w = F'(k). So if the
    conditions hold at the start (the LP rows), every job gets its need, up to
    the LP's tolerance.
    """
    n, n_types = len(need), len(speeds)
    out = np.zeros((n, n_types))
    if n == 0:
        return out
    order = np.argsort(-speeds, kind="stable")
    spd = [float(speeds[t]) for t in order if pool[t] > _TINY]
    seg = [float(pool[t]) for t in order if pool[t] > _TINY]
    typ = [int(t) for t in order if pool[t] > _TINY]
    pad = max(float(n) - sum(seg), 0.0)  # idle time: a job may use less than 1
    spd.append(0.0)
    seg.append(pad)
    typ.append(-1)
    for j in np.argsort(need, kind="stable").tolist():
        u = _window(spd, seg, float(need[j]))
        _cut(spd, seg, typ, u, out[j])
    return out


def _work_between(spd: list[float], seg: list[float], lo: float, hi: float) -> float:
    total, start = 0.0, 0.0
    for v, ln in zip(spd, seg, strict=True):
        end = start + ln
        if end > lo and start < hi:
            total += v * (min(end, hi) - max(start, lo))
        start = end
        if start >= hi:
            break
    return total


def _window(spd: list[float], seg: list[float], need: float) -> float:
    """Largest u in [0, L - 1] with work(u, u + 1) >= need (0 if none has enough).

    G(u) = work(u, u + 1) grows as the window slides left, at rate v(left edge) -
    v(right edge), constant between segment boundaries: walk left from the last
    unit over those boundaries and stop inside the piece where G reaches need.
    """
    bounds = [0.0]
    for ln in seg:
        bounds.append(bounds[-1] + ln)
    length = bounds[-1]
    u = max(length - 1.0, 0.0)
    r = u + 1.0
    g = _work_between(spd, seg, u, r)
    if g >= need:
        return u
    # i: segment just left of u; j: segment just left of r (where each edge moves next).
    i = max(k for k in range(len(seg)) if bounds[k] < u) if u > 0 else 0
    j = max(k for k in range(len(seg)) if bounds[k] < r)
    while u > 0:
        rate = spd[i] - spd[j]
        dl, dr = u - bounds[i], r - bounds[j]
        step = min(dl, dr)
        if rate > 0 and g + rate * step >= need:
            return u - (need - g) / rate
        u, r, g = u - step, r - step, g + rate * step
        if dl <= dr:
            i = max(i - 1, 0)
        if dr <= dl:
            j = max(j - 1, 0)
    return 0.0


def _cut(spd: list[float], seg: list[float], typ: list[int], u: float, row: np.ndarray) -> None:
    """Remove [u, u + 1] from the line, crediting its time per type to `row`."""
    start, i = 0.0, 0
    hi = u + 1.0
    while i < len(seg):
        end = start + seg[i]
        overlap = min(end, hi) - max(start, u)
        if overlap > 0:
            if typ[i] >= 0:
                row[typ[i]] += overlap
            seg[i] -= overlap
        start = end
        if seg[i] <= _TINY and len(seg) > 1:
            del spd[i], seg[i], typ[i]
            continue
        if start >= hi:
            break
        i += 1
