"""From a class solution back to concrete jobs and job pairs, exactly and with bounded size.

Single fractions: every job of a class gets its class's row.

Pair time between two classes c != d (Y per GPU type, shared out so that each
job of c gets Y/n_c and each job of d gets Y/n_d): the north-west-corner rule
of the transportation problem with supplies 1/n_c and demands 1/n_d. It gives at
most n_c + n_d - 1 job pairs with exact marginals. The marginals are uniform,
so one integer pattern (supply n_d units per job of c, demand n_c per job of d)
serves every GPU type, scaled by that type's Y.

Pair time within one class (Y, each job to get 2Y/n): pair job i with job
i+1 (mod n), Y/n each, so every job sits in exactly two pairs. With n == 2 the
two cyclic pairs are the same pair, which then gets all of Y.
"""

from __future__ import annotations

import numpy as np

from slurm_gavel.domain.model import GpuType, JobId, PairShare, Problem
from slurm_gavel.policies.solvers.classes import JobClasses
from slurm_gavel.policies.solvers.mm_lp import PairVars

EPS = 1e-12  # below this a fraction is solver noise, not time


def job_fractions(
    problem: Problem, classes: JobClasses, x: np.ndarray
) -> dict[JobId, dict[GpuType, float]]:
    """Every job gets its class's row (all types listed, 0.0 where none)."""
    x = np.where(x > EPS, x, 0.0)
    # (tolist gives the same Python floats as float() of each element, in one call)
    rows = [dict(zip(classes.types, r, strict=True)) for r in x.tolist()]
    # Each job gets its own dict, so callers may edit one without touching its class.
    of_job = classes.job_class.tolist()  # Python ints: list indexing without numpy scalars
    return {job.id: dict(rows[c]) for job, c in zip(problem.jobs, of_job, strict=True)}


def northwest_corner(n_rows: int, n_cols: int) -> list[tuple[int, int, float]]:
    """Transport n_cols units from each of n_rows sources to n_cols sinks of n_rows units.

    Returns (row, col, share) with shares summing to 1, row sums 1/n_rows and column
    sums 1/n_cols, exactly (integer arithmetic), and at most n_rows + n_cols - 1 entries.
    """
    out: list[tuple[int, int, float]] = []
    total = n_rows * n_cols
    i = j = 0
    supply, demand = n_cols, n_rows
    while i < n_rows and j < n_cols:
        moved = min(supply, demand)
        out.append((i, j, moved / total))
        supply -= moved
        demand -= moved
        if supply == 0:
            i += 1
            supply = n_cols
        if demand == 0:
            j += 1
            demand = n_rows
    return out


def cyclic_pairs(n: int) -> list[tuple[int, int, float]]:
    """Pairs (i, i+1 mod n) sharing total pair time 1, so each job gets 2/n of it."""
    if n < 2:
        return []
    if n == 2:
        return [(0, 1, 1.0)]
    return [(i, (i + 1) % n, 1.0 / n) for i in range(n)]


def pair_shares(
    problem: Problem, classes: JobClasses, pairs: PairVars, y: np.ndarray
) -> list[PairShare]:
    """Concrete PairShare entries for the class-pair totals y (one per job pair)."""
    totals: dict[tuple[int, int], dict[GpuType, float]] = {}
    for p in np.nonzero(y > EPS)[0]:
        key = (int(pairs.c[p]), int(pairs.d[p]))
        totals.setdefault(key, {})[classes.types[int(pairs.t[p])]] = float(y[p])
    ids = [job.id for job in problem.jobs]
    out: list[PairShare] = []
    for (c, d), per_type in totals.items():
        mc, md = classes.members[c], classes.members[d]
        pattern = cyclic_pairs(len(mc)) if c == d else northwest_corner(len(mc), len(md))
        for i, j, share in pattern:
            a, b = ids[mc[i]], ids[(mc if c == d else md)[j]]
            out.append(PairShare((a, b), {t: v * share for t, v in per_type.items()}))
    return out
