"""Max-min fairness over (GPU type, GPU count): the count inside the LP.

Variables, per job j, GPU type t and count c in the job's range: x[j, t, c], the share
of time j runs on c GPUs of type t; and z, the minimum normalised throughput.

    maximise    z
    subject to  sum_{t,c} x[j,t,c] * rate[j,c,t] * n_j / (w_j * P_j)  >= z   (each job)
                sum_{t,c} x[j,t,c]                                     <= 1   (each job)
                sum_{j,c} c * x[j,t,c]                                 <= G_t (each type)
                x[j,t,c] = 0 where rate[j,c,t] = 0 or c > G_t

rate[j,c,t] is j's steps/s on c GPUs of type t (its row at that scale factor), n_j its
rigid request, w_j its priority weight and P_j its rate at n_j averaged over the
cluster's GPUs: the normalisation of the rigid max_min_fairness (``s_j T x / (w P)``),
so a job at its request gets the same value as there, and a job shrunk or grown is
judged by the work it does per wall-clock second. Stage 2, as in mm_lp.py: with the
minimum held (1 - 1e-9 relative), maximise the total normalised throughput.

Jobs with the same rows, request, weight and allowed counts form one class (one set of
columns, the capacity row counting the class's jobs): by symmetry the class LP has the
same optimum as the per-job one (tests/policies/test_mold_lp.py compares them).

:func:`pick_counts` turns the class shares into one count per job: a class's jobs are
spread over its counts in proportion to the time the LP gives each count (largest
remainder, job ids in order, the smaller counts first); a class given no time starts at
its least count. :func:`count_types`: the types it gives time on at that count. Pure
functions; deterministic.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from slurm_gavel.domain.model import GpuType, JobId
from slurm_gavel.policies.solvers.lp import solve_lp

STAGE2_SLACK = 1e-9
_EPS = 1e-9


@dataclass(frozen=True)
class CountJob:
    """One job as the joint LP sees it."""

    id: JobId
    # count -> GPU type -> steps/s of one run of the job at that count on that type
    rates: Mapping[int, Mapping[GpuType, float]]
    request: int  # n_j: its rigid count (the trace's or the submission's)
    norm: float  # P_j: its rate at the request averaged over the cluster's GPUs (> 0)
    weight: float = 1.0


@dataclass(frozen=True)
class CountAllocation:
    """Per job: (type, count) -> share of time; objective: the minimum normalised value."""

    x: dict[JobId, dict[tuple[GpuType, int], float]]
    objective: float


def _key(j: CountJob) -> tuple[object, ...]:
    rates = tuple(sorted((c, tuple(sorted(r.items()))) for c, r in j.rates.items()))
    return (rates, j.request, j.norm, j.weight)


def allocate_counts(jobs: Sequence[CountJob], capacity: Mapping[GpuType, int]) -> CountAllocation:
    """The joint max-min allocation (module doc), solved over job classes."""
    import scipy.sparse as sp  # lazily, as in mm_lp.py

    types = sorted(t for t, g in capacity.items() if g > 0)
    classes: dict[tuple[object, ...], list[CountJob]] = {}
    for j in sorted(jobs, key=lambda j: j.id):
        classes.setdefault(_key(j), []).append(j)
    groups = list(classes.values())
    cols: list[tuple[int, GpuType, int, float]] = []  # (class, type, count, value per time)
    for k, members in enumerate(groups):
        j = members[0]
        for c in sorted(j.rates):
            for t in types:
                rate = j.rates[c].get(t, 0.0)
                if rate > 0 and c <= capacity[t]:
                    cols.append((k, t, c, rate * j.request / (j.weight * j.norm)))
    out: dict[JobId, dict[tuple[GpuType, int], float]] = {j.id: {} for j in jobs}
    if not cols:
        return CountAllocation(out, 0.0)
    ncls, ntypes, ncol = len(groups), len(types), len(cols)
    runnable = sorted({k for k, *_ in cols})
    fair_row = {k: i for i, k in enumerate(runnable)}
    nfair = len(runnable)
    # rows: fairness (runnable classes), time (classes), capacity (types)
    rows_i: list[int] = []
    cols_i: list[int] = []
    vals: list[float] = []
    tindex = {t: i for i, t in enumerate(types)}
    for i, (k, t, c, v) in enumerate(cols):
        rows_i += [fair_row[k], nfair + k, nfair + ncls + tindex[t]]
        cols_i += [i, i, i]
        vals += [v, 1.0, float(c * len(groups[k]))]
    for k in runnable:  # z's column: value - z >= 0
        rows_i.append(fair_row[k])
        cols_i.append(ncol)
        vals.append(-1.0)
    nrows = nfair + ncls + ntypes
    a = sp.csc_matrix((vals, (rows_i, cols_i)), shape=(nrows, ncol + 1))
    inf = np.inf
    lower = np.concatenate([np.zeros(nfair), np.full(ncls + ntypes, -inf)])
    upper = np.concatenate(
        [np.full(nfair, inf), np.ones(ncls), np.array([float(capacity[t]) for t in types])]
    )
    cost = np.zeros(ncol + 1)
    cost[ncol] = 1.0
    first = solve_lp(cost, a, lower, upper, maximize=True, what="joint count LP (stage 1)")
    z = float(first.x[ncol])
    # stage 2: z fixed at its optimum (its column bounded below), maximise the total value
    cost2 = np.zeros(ncol + 1)
    for i, (k, _t, _c, v) in enumerate(cols):
        cost2[i] = v * len(groups[k])
    col_lower = np.zeros(ncol + 1)
    col_lower[ncol] = z * (1 - STAGE2_SLACK) if z > 0 else 0.0
    second = solve_lp(
        cost2, a, lower, upper, col_lower, maximize=True, what="joint count LP (stage 2)"
    )
    x = np.clip(second.x[:ncol], 0.0, 1.0)
    for i, (k, t, c, _v) in enumerate(cols):
        if x[i] > _EPS:
            for j in groups[k]:
                out[j.id][(t, c)] = float(x[i])
    return CountAllocation(out, z)


def pick_counts(jobs: Sequence[CountJob], alloc: CountAllocation) -> dict[JobId, int]:
    """One count per job from the joint allocation (module doc)."""
    classes: dict[tuple[object, ...], list[CountJob]] = {}
    for j in sorted(jobs, key=lambda j: j.id):
        classes.setdefault(_key(j), []).append(j)
    out: dict[JobId, int] = {}
    for members in classes.values():
        counts = sorted(members[0].rates)
        share = alloc.x.get(members[0].id, {})
        mass = [sum(v for (_t, c), v in share.items() if c == cc) for cc in counts]
        total = sum(mass)
        if total <= _EPS:
            for j in members:
                out[j.id] = counts[0]
            continue
        n = len(members)
        exact = [n * m / total for m in mass]
        quota = [int(e) for e in exact]
        # largest remainder; ties to the smaller count
        order = sorted(range(len(counts)), key=lambda i: (-(exact[i] - quota[i]), i))
        for i in order[: n - sum(quota)]:
            quota[i] += 1
        it = iter(members)
        for i, c in enumerate(counts):
            for _ in range(quota[i]):
                out[next(it).id] = c
    return out


def count_types(
    alloc: CountAllocation, picked: Mapping[JobId, int]
) -> dict[JobId, frozenset[GpuType]]:
    """Per job, the GPU types its allocation gives it time on at its picked count
    (empty where it gives none)."""
    return {
        j: frozenset(t for (t, c2), x in alloc.x.get(j, {}).items() if c2 == c and x > _EPS)
        for j, c in picked.items()
    }
