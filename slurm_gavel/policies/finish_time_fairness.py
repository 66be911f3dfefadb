"""finish_time_fairness: Themis-style, as Gavel's FinishTimeFairnessPolicyWithPerf.

    minimise max_j rho_j,   rho_j = (A_j + R_j / rate_j) / D_j

with A_j = time_since_start, R_j = steps_remaining, rate_j = sum_t T_jt x_jt and
D_j the finish time the job would see on its isolated share of the cluster,
computed the way Gavel's current code does (IsolatedPolicy):

    x_iso_jt = cap_t / (n s_j), each row scaled down to sum to at most 1,
    I_j = sum_t T_jt x_iso_jt,          D_j = C_j + R_j / I_j,

where n is the number of jobs and C_j is the *cumulative isolated time*: Gavel
adds, every round, the steps the job made divided by that round's I_j. A policy
here is a pure function of one problem, which carries no such history, so C_j
defaults to time_since_start (exactly the denominator of Gavel's earlier
FinishTimeFairnessPolicyWithPerf: time so far + remaining time in isolation);
`solve` takes the true C_j from a caller that tracks it (accumulate_isolated_time
does Gavel's per-round update). With that default the
isolated allocation itself has rho_j = 1 for every job, so the optimum is <= 1.

Gavel ignores priority weights here (a TODO in its code); so do we. Differences
from Gavel, all deliberate: a type where the job cannot run (throughput 0, or
fewer GPUs than its scale factor) gives it no isolated throughput; jobs with no
steps left (rho would be A_j / C_j whatever we do) and jobs that cannot run
anywhere (rho infinite) are left out of the objective, get no time, and are
named in the notes.

Fast path: ftf_solver, exact over classes of identical jobs (theta = rho,
w_j = R_j / (rho D_j - A_j)); GPUs the optimum leaves idle go to jobs with time
to spare, and the reported rho is recomputed from the per-job fractions.
Reference (options.reference): Gavel's convex program written in cvxpy
(inv_pos) and solved by Clarabel.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from slurm_gavel.domain.model import Allocation, JobId, Problem
from slurm_gavel.policies import PolicyOptions
from slurm_gavel.policies.solvers.classes import (
    JobArrays,
    fractions_dict,
    job_arrays,
    steps_remaining,
)
from slurm_gavel.policies.solvers.ftf_solver import minimise_stretch_over
from slurm_gavel.policies.solvers.lp import SolverError

NAME = "finish_time_fairness"


def allocate(problem: Problem, options: PolicyOptions) -> Allocation:
    return solve(problem, options)


def solve(
    problem: Problem,
    options: PolicyOptions,
    cumulative_isolated_time: Mapping[JobId, float] | None = None,
) -> Allocation:
    arrays = job_arrays(problem)
    steps = steps_remaining(problem, NAME)
    since = np.array([float(j.time_since_start) for j in problem.jobs])
    if cumulative_isolated_time is None:
        done_iso = since
    else:
        done_iso = np.array([float(cumulative_isolated_time.get(j.id, 0.0)) for j in problem.jobs])
    iso = isolated_throughput(arrays)
    with np.errstate(divide="ignore", invalid="ignore"):
        d = done_iso + np.where(iso > 0, steps / iso, np.inf)
    active = arrays.runnable & (steps > 0) & np.isfinite(d) & (d > 0)
    notes = _notes(problem, arrays.runnable, steps)
    if options.reference:
        x, rho = _reference(arrays, steps, since, d, active)
    else:
        x, rho = minimise_stretch_over(arrays, active, steps, d, since, options.time_limit)
    return Allocation(NAME, fractions_dict(problem, arrays.types, x), objective=rho, notes=notes)


def isolated_throughput(arrays: JobArrays) -> np.ndarray:
    """(N,) I_j: the job's rate on its 1/n share of every type (Gavel's IsolatedPolicy)."""
    n = len(arrays.scale)
    if n == 0:
        return np.zeros(0)
    share = (arrays.capacity[None, :] / n) / arrays.scale[:, None]
    share = share / np.maximum(share.sum(axis=1), 1.0)[:, None]
    return (arrays.throughput * share).sum(axis=1)


def accumulate_isolated_time(
    cumulative: Mapping[JobId, float], previous: Problem, current: Problem
) -> dict[JobId, float]:
    """Gavel's bookkeeping for C_j between two rounds, as a pure function.

    C_j grows by the steps the job made since the previous round divided by its
    isolated throughput in that round (previous.jobs, its n and cluster). Jobs
    new in `current` start at 0; finished jobs drop out. A caller that keeps the
    result between rounds and passes it to `solve` gets Gavel's exact rho.
    """
    before = {j.id: j for j in previous.jobs}
    iso = dict(zip(before, isolated_throughput(job_arrays(previous)).tolist(), strict=True))
    out: dict[JobId, float] = {}
    for job in current.jobs:
        acc = float(cumulative.get(job.id, 0.0))
        old = before.get(job.id)
        if old is not None and iso[job.id] > 0:
            made = float(old.steps_remaining or 0.0) - float(job.steps_remaining or 0.0)
            acc += max(made, 0.0) / iso[job.id]
        out[job.id] = acc
    return out


def rho_of(
    problem: Problem,
    alloc: Allocation,
    cumulative_isolated_time: Mapping[JobId, float] | None = None,
) -> dict[JobId, float]:
    """rho_j of every job in the objective, recomputed from the allocation alone."""
    arrays = job_arrays(problem)
    iso = isolated_throughput(arrays)
    out = {}
    for i, job in enumerate(problem.jobs):
        steps = float(job.steps_remaining or 0.0)
        if not arrays.runnable[i] or steps <= 0 or iso[i] <= 0:
            continue
        done = (
            job.time_since_start
            if cumulative_isolated_time is None
            else cumulative_isolated_time.get(job.id, 0.0)
        )
        rate = alloc.effective_throughput(problem, job.id)
        finish = job.time_since_start + (steps / rate if rate > 0 else float("inf"))
        out[job.id] = finish / (done + steps / iso[i])
    return out


def _notes(problem: Problem, runnable: np.ndarray, steps: np.ndarray) -> list[str]:
    notes = []
    stuck = [j.id for j, ok in zip(problem.jobs, runnable, strict=True) if not ok]
    done = [j.id for j, s in zip(problem.jobs, steps, strict=True) if s <= 0]
    for what, ids in (("cannot run on any GPU type here", stuck), ("have no steps left", done)):
        if ids:
            more = " ..." if len(ids) > 10 else ""
            notes.append(
                f"{len(ids)} job(s) {what} and are left out of the objective: "
                f"{', '.join(ids[:10])}{more}"
            )
    return notes


def _reference(
    arrays: JobArrays, steps: np.ndarray, since: np.ndarray, d: np.ndarray, active: np.ndarray
) -> tuple[np.ndarray, float]:
    """Gavel's program: minimise max_j (A_j + R_j inv_pos(rate_j)) / D_j (Clarabel)."""
    import cvxpy as cp  # only the reference path pays for importing cvxpy

    tput = arrays.throughput
    n, k = tput.shape
    idx = np.nonzero(active)[0]
    if len(idx) == 0:
        return np.zeros((n, k)), 0.0
    free = cp.Variable((n, k), nonneg=True)
    x = cp.multiply((tput > 0).astype(float), free)
    rate = cp.sum(cp.multiply(tput, x), axis=1)
    rho = cp.multiply(since[idx] / d[idx], 1.0) + cp.multiply(
        steps[idx] / d[idx], cp.inv_pos(rate[idx])
    )
    cons = [cp.sum(x, axis=1) <= 1, arrays.scale @ x <= arrays.capacity]
    prob = cp.Problem(cp.Minimize(cp.max(rho)), cons)
    prob.solve(solver=cp.CLARABEL)
    if prob.status not in (cp.OPTIMAL, cp.OPTIMAL_INACCURATE) or free.value is None:
        raise SolverError(f"finish_time_fairness reference: cvxpy status '{prob.status}'")
    xv = np.clip(np.asarray(x.value), 0.0, 1.0)
    rates = (tput * xv).sum(axis=1)
    with np.errstate(divide="ignore"):
        achieved = (since[idx] + steps[idx] / rates[idx]) / d[idx]
    return xv, float(achieved.max())
