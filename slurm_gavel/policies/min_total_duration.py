"""min_total_duration: minimise the makespan max_j steps_remaining_j / rate_j, exactly.

Gavel (MinTotalDurationPolicy) bisects on the makespan T with a feasibility LP
per step and stops when the bracket is within 5%, so its answer can be up to 5%
above the optimum. The problem is an LP in disguise: with z = 1 / makespan,

    maximise z  s.t.  sum_t T_jt x_jt >= steps_remaining_j * z,  the base constraints,

which the reference path (options.reference) hands to HiGHS through cvxpy.
The fast path solves the same optimum over classes of identical jobs with
ftf_solver (per-job deadlines w_j = R_j / makespan), so 10,000 jobs cost a
handful of LPs with a few hundred rows instead of one with 30,000 columns.
GPUs the optimum leaves idle go to jobs with time to spare (no job gets slower,
so the makespan stays optimal); the reported makespan is recomputed from the
per-job fractions.

Jobs with nothing left to run do not bound the makespan and get no time; jobs
that cannot run anywhere cannot finish, are left out of the objective, and are
named in the notes.
"""

from __future__ import annotations

import numpy as np

from slurm_gavel.domain.model import Allocation, Problem
from slurm_gavel.policies import PolicyOptions
from slurm_gavel.policies.solvers.classes import fractions_dict, job_arrays, steps_remaining
from slurm_gavel.policies.solvers.ftf_solver import minimise_stretch_over
from slurm_gavel.policies.solvers.lp import SolverError

NAME = "min_total_duration"


def allocate(problem: Problem, options: PolicyOptions) -> Allocation:
    arrays = job_arrays(problem)
    steps = steps_remaining(problem, NAME)
    active = arrays.runnable & (steps > 0)
    notes = _notes(problem, arrays.runnable)
    if options.reference:
        x, makespan = _reference(arrays.throughput, arrays.scale, arrays.capacity, steps, active)
    else:
        # the makespan is the stretch with every reference time 1 and nothing done yet
        ones, zeros = np.ones(len(steps)), np.zeros(len(steps))
        x, makespan = minimise_stretch_over(arrays, active, steps, ones, zeros, options.time_limit)
    return Allocation(
        NAME, fractions_dict(problem, arrays.types, x), objective=makespan, notes=notes
    )


def makespan_of(problem: Problem, alloc: Allocation) -> float:
    """max over jobs with steps left (and somewhere to run) of steps / rate, in seconds."""
    arrays = job_arrays(problem)
    worst = 0.0
    for i, job in enumerate(problem.jobs):
        if not arrays.runnable[i] or not job.steps_remaining:
            continue
        rate = alloc.effective_throughput(problem, job.id)
        worst = max(worst, job.steps_remaining / rate if rate > 0 else float("inf"))
    return worst


def _notes(problem: Problem, runnable: np.ndarray) -> list[str]:
    stuck = [j.id for j, ok in zip(problem.jobs, runnable, strict=True) if not ok]
    if not stuck:
        return []
    return [
        f"{len(stuck)} job(s) cannot run on any GPU type here and are left out of the "
        f"makespan: {', '.join(stuck[:10])}{' ...' if len(stuck) > 10 else ''}"
    ]


def _reference(
    tput: np.ndarray, scale: np.ndarray, cap: np.ndarray, steps: np.ndarray, active: np.ndarray
) -> tuple[np.ndarray, float]:
    """The plain per-job LP in cvxpy (HiGHS): maximise z = 1 / makespan."""
    import cvxpy as cp  # only the reference path pays for importing cvxpy

    n, k = tput.shape
    if not active.any():
        return np.zeros((n, k)), 0.0
    free = cp.Variable((n, k), nonneg=True)
    x = cp.multiply((tput > 0).astype(float), free)  # no time where the job cannot run
    z = cp.Variable(nonneg=True)
    rate = cp.sum(cp.multiply(tput, x), axis=1)
    cons = [
        cp.sum(x, axis=1) <= 1,
        scale @ x <= cap,
        rate[active] >= cp.multiply(steps[active], z),
    ]
    prob = cp.Problem(cp.Maximize(z), cons)
    prob.solve(solver=cp.HIGHS)
    if prob.status != cp.OPTIMAL or z.value is None or z.value <= 0:
        raise SolverError(f"min_total_duration reference LP: cvxpy status '{prob.status}'")
    xv = np.clip(np.asarray(x.value), 0.0, 1.0)
    rates = (tput * xv).sum(axis=1)
    return xv, float(np.max(steps[active] / rates[active]))
