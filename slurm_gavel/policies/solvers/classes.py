"""Job classes: jobs the LP cannot tell apart, solved once per class instead of once per job.

Two jobs are in one class when every coefficient the LP sees for them is equal:
the same throughput row, scale factor and priority weight (and, for space
sharing, the same job type, since pair throughputs are looked up by type).
Swapping two jobs of one class maps feasible allocations to feasible
allocations with the same objective (a symmetry of the LP), and the feasible
set is convex, so averaging an optimum over all such swaps is again an
optimum in which every job of a class has the same fractions. Solving for one
fraction row per class, with the class's capacity use multiplied by its size,
is therefore exact, not a heuristic. 10,000 synthetic jobs form ~100 classes.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from slurm_gavel.errors import InputError
from slurm_gavel.model import GpuType, Problem


class PolicyInputError(InputError):
    """A job carries a value the policies cannot use; the message names the job and the fix."""


@dataclass(frozen=True)
class JobClasses:
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
    """Group the problem's jobs into LP-identical classes (in order of first appearance)."""
    types = problem.gpu_types
    keys: dict[tuple[object, ...], int] = {}
    job_class = np.empty(len(problem.jobs), dtype=np.int64)
    rows: list[tuple[float, ...]] = []
    scales: list[int] = []
    weights: list[float] = []
    job_types: list[str] = []
    for i, job in enumerate(problem.jobs):
        if not job.priority_weight > 0:
            raise PolicyInputError(
                f"job {job.id}: priority_weight {job.priority_weight!r} must be > 0"
            )
        if job.scale_factor < 1:
            raise PolicyInputError(f"job {job.id}: scale_factor {job.scale_factor} must be >= 1")
        row = tuple(float(job.throughput.get(t, 0.0)) for t in types)
        key: tuple[object, ...] = (row, job.scale_factor, job.priority_weight)
        if by_job_type:
            key += (job.job_type,)
        c = keys.get(key)
        if c is None:
            c = keys[key] = len(rows)
            rows.append(row)
            scales.append(job.scale_factor)
            weights.append(float(job.priority_weight))
            job_types.append(job.job_type)
        job_class[i] = c
    order = np.argsort(job_class, kind="stable")
    bounds = np.searchsorted(job_class[order], np.arange(len(rows) + 1))
    members = [order[bounds[c] : bounds[c + 1]] for c in range(len(rows))]
    return JobClasses(
        types=types,
        capacity=np.array([float(problem.cluster[t]) for t in types]),
        throughput=np.array(rows, dtype=np.float64).reshape(len(rows), len(types)),
        scale=np.array(scales, dtype=np.float64),
        weight=np.array(weights, dtype=np.float64),
        job_type=job_types,
        members=members,
        job_class=job_class,
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
