"""min_cost: Gavel's cost policy with SLOs (ThroughputNormalizedByCostSumWithPerfSLOs).

    maximise   sum_j sum_t x_jt * T_jt / (price_t * s_j)      (steps per dollar)
    subject to the base constraints, and for every job with an SLO
               sum_t T_jt x_jt >= steps_remaining_j / slo_j    (it finishes in time).

Gavel divides throughput by the per-GPU price only; a job on s GPUs pays s of
them, so we divide by s_j * price_t (identical when every job has one GPU). The
reported objective is that sum times 3600: steps per dollar, summed over jobs.
Priority weights play no part (as in Gavel).

Gavel, when the SLOs cannot all be met, prints a warning and drops them all. We
raise SloInfeasibleError naming the jobs: first those that cannot meet their SLO
even alone on their fastest type (or whose SLO has already passed), otherwise
the jobs left short by an LP that maximises the total fraction of the required
throughput met.

Fast path: one LP over classes of identical jobs (same row and scale factor);
SLO jobs of a class enter through ftf_requirements' rows, which are exact, and
split_class hands out the per-job fractions. With per-job rows (no classes, from
2,000 jobs) the job-level LP by decomposition (solvers/cost_dw.py); a time limit
covers it and the class LP after it (which gets the time left). Reference
(options.reference): the per-job LP in cvxpy (HiGHS).
"""

from __future__ import annotations

import time
from collections.abc import Callable

import highspy
import numpy as np
import scipy.sparse as sp

from slurm_gavel.domain.model import Allocation, Problem
from slurm_gavel.errors import InputError, SolveError
from slurm_gavel.policies import PolicyOptions
from slurm_gavel.policies.solvers.classes import JobArrays, fractions_dict, group, job_arrays
from slurm_gavel.policies.solvers.cost_dw import solve_decomposed, use_decomposition
from slurm_gavel.policies.solvers.deadline import Deadline
from slurm_gavel.policies.solvers.ftf_requirements import requirement_rows, split_class
from slurm_gavel.policies.solvers.ftf_solver import solve_lp_sized
from slurm_gavel.policies.solvers.lp import SolverError

NAME = "min_cost"
SECONDS_PER_HOUR = 3600.0


class MissingPriceError(InputError):
    pass


class SloInfeasibleError(SolveError):
    pass


def allocate(problem: Problem, options: PolicyOptions) -> Allocation:
    arrays = job_arrays(problem)
    value = steps_per_dollar(problem, arrays)
    need = slo_rates(problem)
    _check_individual(problem, arrays, need)
    if options.reference:
        x = _reference(arrays, value, need)
    else:
        x = _fast(problem, arrays, value, need, options.time_limit)
    objective = float((x * value).sum())
    return Allocation(NAME, fractions_dict(problem, arrays.types, x), objective=objective)


def steps_per_dollar(problem: Problem, arrays: JobArrays) -> np.ndarray:
    """(N, K) steps per dollar of job j on type t (0 where it may not run)."""
    prices = []
    for t, cap in zip(arrays.types, arrays.capacity, strict=True):
        p = problem.prices.get(t)
        if cap > 0 and (p is None or not np.isfinite(p) or p <= 0):
            got = "no price" if p is None else f"price {p!r}"
            raise MissingPriceError(
                f'min_cost: GPU type \'{t}\' has {got}; add "prices": {{"{t}": <dollars per '
                f"GPU-hour, > 0>}} to the problem JSON (or prices in the daemon config)"
            )
        prices.append(float(p) if p else np.inf)
    price = np.array(prices)
    return arrays.throughput * SECONDS_PER_HOUR / (price[None, :] * arrays.scale[:, None])


def slo_rates(problem: Problem) -> np.ndarray:
    """(N,) steps/s each job needs to meet its SLO (0 without one); inf if it has passed."""
    out = np.zeros(len(problem.jobs))
    for i, job in enumerate(problem.jobs):
        if job.slo is None:
            continue
        if job.steps_remaining is None:
            raise InputError(
                f"job {job.id}: min_cost needs steps_remaining for a job with an SLO; "
                "add it to the job in the problem JSON"
            )
        if job.steps_remaining <= 0:
            continue
        out[i] = job.steps_remaining / job.slo if job.slo > 0 else np.inf
    return out


def _check_individual(problem: Problem, arrays: JobArrays, need: np.ndarray) -> None:
    best = arrays.throughput.max(axis=1, initial=0.0)
    bad = [
        f"{job.id} (needs {need[i]:.4g} steps/s, at most {best[i]:.4g} alone)"
        if np.isfinite(need[i])
        else f"{job.id} (SLO already passed)"
        for i, job in enumerate(problem.jobs)
        if need[i] > best[i] * (1 + 1e-9)
    ]
    if bad:
        raise SloInfeasibleError(
            f"min_cost: {len(bad)} SLO(s) cannot be met even with the job alone on its "
            f"fastest GPU type: {'; '.join(bad[:10])}{' ...' if len(bad) > 10 else ''}; "
            "relax these SLOs or drop them"
        )


def _fast(
    problem: Problem,
    arrays: JobArrays,
    value: np.ndarray,
    need: np.ndarray,
    time_limit: float | None,
    clock: Callable[[], float] = time.monotonic,
) -> np.ndarray:
    n, k = arrays.throughput.shape
    classes = group(arrays, mask=arrays.runnable)
    x = np.zeros((n, k))
    if len(classes) == 0:
        return x
    if use_decomposition(int(arrays.runnable.sum()), len(classes), k):
        run = arrays.runnable  # per-job rows: by decomposition (cost_dw.py)
        deadline = Deadline.after(time_limit, "min_cost decomposition", clock)
        xr = solve_decomposed(
            arrays.throughput[run], arrays.scale[run], arrays.capacity, value[run], need[run],
            deadline,
        )  # fmt: skip
        if xr is not None:
            x[run] = np.clip(xr, 0.0, 1.0)
            return x
        time_limit = deadline.remaining()  # the class LP below gets the time left
    first = classes.first
    class_tput = arrays.throughput[first]
    rows = requirement_rows(class_tput, classes.of_job)
    psi = rows.psi(need)
    xc, xt = np.nonzero(class_tput > 0)
    nx, n_cls, n_req = len(xc), len(classes), len(rows.row_class)
    col_of = np.full((n_cls, k), -1, dtype=np.int64)
    col_of[xc, xt] = np.arange(nx)
    # Rows with psi = 0 (no SLO job above that speed) hold for any X >= 0: drop them.
    rr, rt = np.nonzero((rows.coef > 0) & (psi[:, None] > 0))
    rcol = col_of[rows.row_class[rr], rt]
    keep = rcol >= 0
    rr, rt, rcol = rr[keep], rt[keep], rcol[keep]
    # rows: requirements (n_req) >= psi; class time (n_cls) <= n_c; capacity (k) <= cap_t
    r = np.concatenate([rr, n_req + xc, n_req + n_cls + xt])
    c = np.concatenate([rcol, np.arange(nx), np.arange(nx)])
    v = np.concatenate([rows.coef[rr, rt], np.ones(nx), arrays.scale[first][xc]])
    a = sp.csc_matrix((v, (r, c)), shape=(n_req + n_cls + k, nx))
    a.sum_duplicates()
    lower = np.concatenate([psi, np.full(n_cls + k, -highspy.kHighsInf)])
    upper = np.concatenate([np.full(n_req, highspy.kHighsInf), classes.count, arrays.capacity])
    try:
        sol = solve_lp_sized(
            value[first][xc, xt], a, lower, upper, maximize=True, time_limit=time_limit, what=NAME
        )
    except SolverError as e:
        if "nfeasible" in str(e):
            _raise_infeasible(problem, arrays, need)
        raise
    pool = np.zeros((n_cls, k))
    pool[xc, xt] = np.maximum(sol, 0.0)
    for ci, idx in enumerate(classes.members):
        x[idx] = split_class(class_tput[ci], pool[ci], need[idx])
    return x


def _raise_infeasible(problem: Problem, arrays: JobArrays, need: np.ndarray) -> None:
    """Name the jobs left short when the total fraction of required throughput is maximised."""
    import cvxpy as cp  # only the reference path pays for importing cvxpy

    idx = np.nonzero(need > 0)[0]
    tput = arrays.throughput[idx]
    m, k = tput.shape
    free = cp.Variable((m, k), nonneg=True)
    x = cp.multiply((tput > 0).astype(float), free)
    met = cp.Variable(m)
    cons = [
        met <= 1,
        met >= 0,
        cp.sum(cp.multiply(tput, x), axis=1) >= cp.multiply(need[idx], met),
        cp.sum(x, axis=1) <= 1,
        arrays.scale[idx] @ x <= arrays.capacity,
    ]
    prob = cp.Problem(cp.Maximize(cp.sum(met)), cons)
    prob.solve(solver=cp.HIGHS)
    if met.value is None:
        raise SloInfeasibleError(f"min_cost: the SLOs cannot all be met (diagnosis: {prob.status})")
    short = [
        f"{problem.jobs[i].id} ({100 * float(f):.1f}% of the rate it needs)"
        for i, f in zip(idx, met.value, strict=True)
        if f < 1 - 1e-6
    ]
    raise SloInfeasibleError(
        f"min_cost: the SLOs cannot all be met together; meeting as many as possible "
        f"leaves {len(short)} job(s) short: {'; '.join(short[:10])}"
        f"{' ...' if len(short) > 10 else ''}; relax these SLOs, drop some, or add GPUs"
    )


def _reference(arrays: JobArrays, value: np.ndarray, need: np.ndarray) -> np.ndarray:
    import cvxpy as cp  # only the reference path pays for importing cvxpy

    tput = arrays.throughput
    n, k = tput.shape
    if n == 0:
        return np.zeros((0, k))
    free = cp.Variable((n, k), nonneg=True)
    x = cp.multiply((tput > 0).astype(float), free)
    cons = [cp.sum(x, axis=1) <= 1, arrays.scale @ x <= arrays.capacity]
    slo = np.nonzero(need > 0)[0]
    if len(slo):
        cons.append(cp.sum(cp.multiply(tput[slo], x[slo]), axis=1) >= need[slo])
    prob = cp.Problem(cp.Maximize(cp.sum(cp.multiply(value, x))), cons)
    prob.solve(solver=cp.HIGHS)
    if prob.status != cp.OPTIMAL:
        raise SloInfeasibleError(f"min_cost reference: cvxpy status '{prob.status}'")
    return np.clip(np.asarray(x.value), 0.0, 1.0)
