"""Rows for jobs of no known type: Gavel's matrix completion with the jobs
seen so far as rows, beside the throughput table's job types (estimate.py fits types
only). Pure; job_rows.py calls it for a job whose model the table never saw.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

import numpy as np

from slurm_gavel.core.estimate import complete_matrix, is_estimate
from slurm_gavel.domain.model import GpuType
from slurm_gavel.domain.throughputs import ThroughputTable


def estimate_job_rows(
    table: ThroughputTable,
    scale_factor: int,
    gpu_types: Iterable[GpuType],
    measured: Mapping[str, Mapping[GpuType, float]],
    *,
    rank: int = 1,
    reg: float = 0.1,
    max_jobs: int = 256,
    iters: int = 60,
) -> dict[str, dict[GpuType, float]]:
    """Rows on ``gpu_types`` for jobs of no known type: the completion above
    with the table's measured rows at this scale factor *and the jobs* as rows, each job
    with the cells it was measured on (none for a job just submitted). Keys of
    ``measured`` are job ids; the first ``max_jobs`` of them take part (the caller puts
    the jobs it asks about first: a fit over thousands of rows costs seconds).

    A job with no cell is the typical job (the table's column means at the median
    level of the measured jobs); one with cells gets its level from them and its
    family from them and the others' ratios. A GPU type nothing was measured on, at this size, gets
    the job's type-blind figure (the geometric mean of its other cells); with nothing
    measured anywhere every cell is 1 step/s, type-blind, a placeholder for the policy.
    Measured cells are returned as given.
    """
    types = list(dict.fromkeys(gpu_types))
    cols = types + [t for t in table.gpu_types if t not in types]  # the fit uses every column
    index = {t: k for k, t in enumerate(cols)}
    ref: list[list[float]] = []
    for (jt, sf), row in table.alone.items():
        if sf != scale_factor:
            continue
        ref.append([math.nan] * len(cols))
        for t, v in row.items():
            if v > 0 and t in index and not is_estimate(table, jt, sf, t):
                ref[-1][index[t]] = math.log(v)
    # Each job's row enters the fit at the table's level (its cells less its offset
    # from the table's column means): the fit gives a job its ratios between types from
    # the others', never their level, so a job's unit (steps ten times smaller, every
    # figure ten times larger: the job's word) moves no measured job's estimate. Its own
    # offset comes back onto its row below; a job with no cell gets the median of the
    # measured jobs' offsets (the level the jobs of no known type have run at, which
    # one job's unit moves by one rank at most, not by its factor).
    table_logs = np.array(ref, dtype=float).reshape(len(ref), len(cols))
    col_ref = [
        float(np.nanmean(table_logs[:, k])) if (~np.isnan(table_logs[:, k])).any() else None
        for k in range(len(cols))
    ]
    jobs = list(measured)[:max_jobs]
    offset: dict[str, float] = {}
    measured_level: set[str] = set()  # the jobs whose cells say their level
    for j in jobs:
        logs_j = {
            index[t]: math.log(v)
            for t, v in measured[j].items()
            if t in index and v > 0 and math.isfinite(v)
        }
        apart = [v - c for k, v in logs_j.items() if (c := col_ref[k]) is not None]
        offset[j] = sum(apart) / len(apart) if apart else 0.0
        if apart:
            measured_level.add(j)
        ref.append([math.nan] * len(cols))
        for k, v in logs_j.items():
            ref[-1][k] = v - offset[j]
    obs = np.array(ref, dtype=float).reshape(len(ref), len(cols))
    levels = [offset[j] for j in jobs if j in measured_level]
    typical = float(np.median(levels)) if levels else 0.0
    for j in jobs:
        if j not in measured_level:
            offset[j] = typical
    first_job = len(ref) - len(jobs)
    if not (~np.isnan(obs)).any():
        return {j: dict.fromkeys(types, 1.0) for j in jobs}
    rank_here = min(rank, max(0, min(obs.shape) - 1))
    filled = complete_matrix(obs, rank=rank_here, reg=reg, iters=iters)
    # A job with at most `rank` cells has no family to fit (one cell cannot tell a
    # factor from its level: a rank-1 fit of one fast v100 cell makes its k80 slower):
    # such jobs get the biases-only fit, "as much faster everywhere".
    cells = (~np.isnan(obs)).sum(axis=1)
    flat = filled
    if rank_here > 0 and (cells[first_job:] <= rank_here).any():
        flat = complete_matrix(obs, rank=0, reg=reg, iters=iters)
    seen_col = ~np.isnan(obs).all(axis=0)
    out: dict[str, dict[GpuType, float]] = {}
    for i, j in enumerate(jobs):
        row_fit = flat if cells[first_job + i] <= rank_here else filled
        logs = row_fit[first_job + i] + offset[j]
        level = float(logs[seen_col].mean())  # the type-blind figure, in log space
        out[j] = {
            t: float(math.exp(logs[index[t]] if seen_col[index[t]] else level)) for t in types
        }
        for t, v in measured[j].items():  # exactly, not through exp(log(v))
            if t in out[j] and v > 0 and math.isfinite(v):
                out[j][t] = float(v)
    return out
