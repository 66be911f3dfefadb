"""Job arrays and throughput classes shared by the deadline-style policies.

finish_time_fairness, min_total_duration, min_cost and the hierarchical policy all
start from the same dense view of a problem: a (jobs x types) throughput matrix in
which a cell is zero wherever the job may not get time (it does not run there, or
it needs more GPUs than the type has), plus the per-job scalars. Jobs with an
identical row and scale factor form a *class*: every coefficient the class-level
LPs see is equal for them, which is what makes solving per class exact (see
ftf_requirements for the per-job deadlines on top of a class).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from slurm_gavel.errors import InputError
from slurm_gavel.model import GpuType, Problem


class PolicyJobError(InputError):
    """A job lacks a value the policy needs; the message names the job and the fix."""


@dataclass(frozen=True)
class JobArrays:
    types: list[GpuType]
    capacity: np.ndarray  # (K,) GPUs per type
    throughput: np.ndarray  # (N, K) steps/s, 0 where the job may not get time
    raw_throughput: np.ndarray  # (N, K) as given (also where the job does not fit)
    scale: np.ndarray  # (N,) GPUs per job
    weight: np.ndarray  # (N,) priority weights

    @property
    def runnable(self) -> np.ndarray:
        """(N,) the job can get time on at least one type."""
        return self.throughput.max(axis=1, initial=0.0) > 0


def job_arrays(problem: Problem) -> JobArrays:
    types = problem.gpu_types
    jobs = problem.jobs
    capacity = np.array([float(problem.cluster[t]) for t in types])
    tput = np.array(
        [[j.throughput.get(t, 0.0) for t in types] for j in jobs], dtype=np.float64
    ).reshape(len(jobs), len(types))
    scale = np.array([j.scale_factor for j in jobs], dtype=np.float64)
    weight = np.array([j.priority_weight for j in jobs], dtype=np.float64)
    # Validate in bulk; name the first offending job.
    bad_rows = ~(np.isfinite(tput) & (tput >= 0)).all(axis=1)
    if bad_rows.any():
        i = int(np.argmax(bad_rows))
        k = int(np.argmax(~(np.isfinite(tput[i]) & (tput[i] >= 0))))
        raise PolicyJobError(
            f"job {jobs[i].id}: throughput on {types[k]} is {tput[i, k]!r}; give a number >= 0"
        )
    if (scale < 1).any():
        i = int(np.argmax(scale < 1))
        raise PolicyJobError(f"job {jobs[i].id}: scale_factor {jobs[i].scale_factor} must be >= 1")
    if not (weight > 0).all():
        i = int(np.argmax(~(weight > 0)))
        raise PolicyJobError(
            f"job {jobs[i].id}: priority_weight {jobs[i].priority_weight!r} must be > 0"
        )
    # No time where a job cannot run or does not fit (the contract's x_jt = 0 cells).
    raw = tput.copy()
    tput[scale[:, None] > capacity[None, :]] = 0.0
    return JobArrays(types, capacity, tput, raw, scale, weight)


def steps_remaining(problem: Problem, policy: str) -> np.ndarray:
    """(N,) steps left per job; the deadline policies cannot run without them."""
    raw = [j.steps_remaining for j in problem.jobs]
    if None in raw:
        job = problem.jobs[raw.index(None)]
        raise PolicyJobError(
            f"job {job.id}: {policy} needs steps_remaining; add it to the job "
            f"in the problem JSON (steps the job still has to run)"
        )
    out = np.array(raw, dtype=np.float64)
    bad = ~(np.isfinite(out) & (out >= 0))
    if bad.any():
        job = problem.jobs[int(np.argmax(bad))]
        raise PolicyJobError(
            f"job {job.id}: steps_remaining {job.steps_remaining!r} must be a number >= 0"
        )
    return out


@dataclass(frozen=True)
class Classes:
    """Jobs grouped by a key; class c's members are `members[c]` (ascending job indices)."""

    of_job: np.ndarray  # (N,) class index of each job
    members: list[np.ndarray]
    first: np.ndarray  # (C,) one representative job per class

    @property
    def count(self) -> np.ndarray:
        return np.array([len(m) for m in self.members], dtype=np.float64)

    def __len__(self) -> int:
        return len(self.members)


def group(
    arrays: JobArrays, extra: np.ndarray | None = None, mask: np.ndarray | None = None
) -> Classes:
    """Group jobs (only those where `mask` is true, if given) by equal (row, scale[, extra]).

    `extra` (N, E) holds further numbers that must match within a class. Classes
    are numbered in order of their first job, members ascending.
    """
    n = len(arrays.scale)
    cols = [arrays.throughput, arrays.scale[:, None]]
    if extra is not None:
        cols.append(np.asarray(extra, dtype=np.float64).reshape(n, -1))
    keys = np.hstack(cols)
    picked = np.arange(n) if mask is None else np.nonzero(mask)[0]
    of_job = np.full(n, -1, dtype=np.int64)
    if len(picked) == 0:
        return Classes(of_job, [], np.zeros(0, dtype=np.int64))
    _, first_pos, inverse = np.unique(keys[picked], axis=0, return_index=True, return_inverse=True)
    inverse = inverse.reshape(-1)
    # Renumber classes by first appearance, so the numbering does not depend on sorting.
    rank = np.empty(len(first_pos), dtype=np.int64)
    rank[np.argsort(first_pos, kind="stable")] = np.arange(len(first_pos))
    of_job[picked] = rank[inverse]
    first = picked[np.sort(first_pos)]
    order = picked[np.argsort(of_job[picked], kind="stable")]
    bounds = np.searchsorted(of_job[order], np.arange(len(first) + 1))
    members = [order[bounds[c] : bounds[c + 1]] for c in range(len(first))]
    return Classes(of_job, members, first)


def fractions_dict(
    problem: Problem, types: list[GpuType], x: np.ndarray
) -> dict[str, dict[GpuType, float]]:
    """(N, K) fractions -> the Allocation mapping: every type listed, 0.0 where none.

    Entries below 1e-12 are solver noise, not time; values are clipped to [0, 1].
    """
    x = np.where(x > 1e-12, np.minimum(x, 1.0), 0.0)
    return {
        job.id: dict(zip(types, row, strict=True))
        for job, row in zip(problem.jobs, x.tolist(), strict=True)
    }
