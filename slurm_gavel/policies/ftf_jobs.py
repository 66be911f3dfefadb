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

from collections.abc import Callable, Hashable
from dataclasses import dataclass

import numpy as np

from slurm_gavel.errors import InputError
from slurm_gavel.model import GpuType, Problem, ProblemJob


class PolicyJobError(InputError):
    """A job lacks a value the policy needs; the message names the job and the fix."""


@dataclass(frozen=True)
class JobArrays:
    types: list[GpuType]
    capacity: np.ndarray  # (K,) GPUs per type
    throughput: np.ndarray  # (N, K) steps/s, 0 where the job may not get time
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
    tput[scale[:, None] > capacity[None, :]] = 0.0
    return JobArrays(types, capacity, tput, scale, weight)


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
    arrays: JobArrays,
    jobs: tuple[ProblemJob, ...],
    extra_key: Callable[[int, ProblemJob], Hashable] | None = None,
    mask: np.ndarray | None = None,
) -> Classes:
    """Group jobs (only those where `mask` is true, if given) by (row, scale[, extra])."""
    keys: dict[Hashable, int] = {}
    of_job = np.full(len(jobs), -1, dtype=np.int64)
    first: list[int] = []
    rows = arrays.throughput
    for i, job in enumerate(jobs):
        if mask is not None and not mask[i]:
            continue
        key: Hashable = (rows[i].tobytes(), arrays.scale[i])
        if extra_key is not None:
            key = (key, extra_key(i, job))
        c = keys.get(key)
        if c is None:
            c = keys[key] = len(first)
            first.append(i)
        of_job[i] = c
    picked = np.nonzero(of_job >= 0)[0]
    order = picked[np.argsort(of_job[picked], kind="stable")]
    bounds = np.searchsorted(of_job[order], np.arange(len(first) + 1))
    members = [order[bounds[c] : bounds[c + 1]] for c in range(len(first))]
    return Classes(of_job, members, np.array(first, dtype=np.int64))


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
