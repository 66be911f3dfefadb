"""Job arrays and job classes: what every LP policy starts from.

`job_arrays` is the dense view of a problem (a jobs x types throughput matrix and
the per-job scalars), validated once. `group` is the one job-class grouping:
jobs whose key rows are equal form a class. Two jobs are in one class when every
coefficient an LP sees for them is equal (the same throughput row and scale
factor, plus whatever else that LP reads: priority weight, job type for pair
throughputs, entity); swapping them maps feasible allocations to feasible
allocations with the same objective (a symmetry of the LP), and the feasible set
is convex, so averaging an optimum over all such swaps is again an optimum in
which every job of a class has the same fractions. Solving for one fraction row
per class, with the class's capacity use multiplied by its size, is therefore
exact, not a heuristic. 10,000 synthetic jobs form ~100 classes.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from slurm_gavel.domain.model import GpuType, Problem
from slurm_gavel.errors import InputError


class PolicyInputError(InputError):
    """A job carries a value the policies cannot use; the message names the job and the fix."""


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
        raise PolicyInputError(
            f"job {jobs[i].id}: throughput on {types[k]} is {float(tput[i, k])!r}; "
            "give a number >= 0"
        )
    if (scale < 1).any():
        i = int(np.argmax(scale < 1))
        raise PolicyInputError(
            f"job {jobs[i].id}: scale_factor {jobs[i].scale_factor} must be >= 1"
        )
    if not (weight > 0).all():
        i = int(np.argmax(~(weight > 0)))
        raise PolicyInputError(
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
        raise PolicyInputError(
            f"job {job.id}: {policy} needs steps_remaining; add it to the job "
            f"in the problem JSON (steps the job still has to run)"
        )
    out = np.array(raw, dtype=np.float64)
    bad = ~(np.isfinite(out) & (out >= 0))
    if bad.any():
        job = problem.jobs[int(np.argmax(bad))]
        raise PolicyInputError(
            f"job {job.id}: steps_remaining {job.steps_remaining!r} must be a number >= 0"
        )
    return out


@dataclass(frozen=True)
class Classes:
    """Jobs grouped by a key; class c's members are `members[c]` (ascending job indices)."""

    of_job: np.ndarray  # (N,) class index of each job, -1 for jobs the mask left out
    members: list[np.ndarray]
    first: np.ndarray  # (C,) one representative job per class

    @property
    def count(self) -> np.ndarray:
        return np.array([len(m) for m in self.members], dtype=np.float64)

    def __len__(self) -> int:
        return len(self.members)


def group_rows(keys: np.ndarray, mask: np.ndarray | None = None) -> Classes:
    """The job classes: jobs (rows of `keys`; only those where `mask` is true, if
    given) with equal key rows. Classes are numbered in order of their first job,
    members ascending."""
    n = keys.shape[0]
    picked = np.arange(n) if mask is None else np.nonzero(mask)[0]
    index: dict[tuple[float, ...], int] = {}
    numbered = [index.setdefault(tuple(row), len(index)) for row in keys[picked].tolist()]
    of_job = np.full(n, -1, dtype=np.int64)
    of_job[picked] = numbered
    order = picked[np.argsort(of_job[picked], kind="stable")]
    bounds = np.searchsorted(of_job[order], np.arange(len(index) + 1))
    members = [order[bounds[c] : bounds[c + 1]] for c in range(len(index))]
    first = order[bounds[:-1]].astype(np.int64, copy=False)  # each class's first member
    return Classes(of_job, members, first)


def group(
    arrays: JobArrays, extra: np.ndarray | None = None, mask: np.ndarray | None = None
) -> Classes:
    """Classes of equal (throughput row where the job may get time, scale[, extra]);
    `extra` (N, E) holds further numbers the policy's LP reads per job."""
    n = len(arrays.scale)
    cols = [arrays.throughput, arrays.scale[:, None]]
    if extra is not None:
        cols.append(np.asarray(extra, dtype=np.float64).reshape(n, -1))
    return group_rows(np.hstack(cols), mask)


@dataclass(frozen=True)
class JobClasses:
    """The max-min family's classes with their per-class coefficients."""

    types: list[GpuType]  # column order of every (class, type) array
    capacity: np.ndarray  # (K,) GPUs per type
    throughput: np.ndarray  # (C, K) steps/s of one job of the class on each type
    scale: np.ndarray  # (C,) GPUs per job
    weight: np.ndarray  # (C,) priority weight
    job_type: list[str]  # (C,)
    members: list[np.ndarray]  # (C,) indices into problem.jobs, ascending
    job_class: np.ndarray  # (N,) class of each job

    @property
    def count(self) -> np.ndarray:
        return np.array([len(m) for m in self.members], dtype=np.float64)

    @property
    def n_classes(self) -> int:
        return len(self.members)

    def allowed(self) -> np.ndarray:
        """(C, K) mask: the class may get time on the type (it runs there and fits)."""
        return (self.throughput > 0) & (self.scale[:, None] <= self.capacity[None, :])


def group_jobs(problem: Problem, *, by_job_type: bool = False) -> JobClasses:
    """Classes of equal (throughput row as given, scale, priority weight[, job type]):
    pair throughputs are looked up by job type, so packing needs it in the key."""
    arrays = job_arrays(problem)
    cols = [arrays.raw_throughput, arrays.scale[:, None], arrays.weight[:, None]]
    if by_job_type:
        codes: dict[str, int] = {}
        cols.append(
            np.array(
                [codes.setdefault(j.job_type, len(codes)) for j in problem.jobs], dtype=np.float64
            )[:, None]
        )
    classes = group_rows(np.hstack(cols))
    first = classes.first
    return JobClasses(
        types=arrays.types,
        capacity=arrays.capacity,
        throughput=arrays.raw_throughput[first],
        scale=arrays.scale[first],
        weight=arrays.weight[first],
        job_type=[problem.jobs[i].job_type for i in first],
        members=classes.members,
        job_class=classes.of_job,
    )


def capacity_share_throughput(throughput: np.ndarray, capacity: np.ndarray) -> np.ndarray:
    """P_j = sum_t T_jt cap_t / sum_t cap_t: a job's rate on a capacity-proportional share.

    This is the normaliser docs/design.md §2.2 gives for max-min fairness (rows of `throughput`).
    """
    total = float(capacity.sum())
    if total <= 0:
        return np.zeros(throughput.shape[0])
    return throughput @ capacity / total


def fairness_coefficients(classes: JobClasses, throughput: np.ndarray) -> np.ndarray:
    """(C, K) normalised value per unit of time: s_c T_ct / (w_c P_c), 0 where not allowed."""
    p = capacity_share_throughput(throughput, classes.capacity)
    with np.errstate(divide="ignore", invalid="ignore"):
        coef = classes.scale[:, None] * throughput / (classes.weight * p)[:, None]
    coef[~np.isfinite(coef)] = 0.0
    coef[~classes.allowed()] = 0.0
    return coef


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
