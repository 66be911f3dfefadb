"""The reference path: plain cvxpy LPs with one variable per job (and per job pair).

Deliberately independent of the class aggregation (it shares only the candidate
rule and the normalisation formula, written out again here per job), so tests
can compare the fast path against it. Slow: the pair variables grow with the
square of the number of jobs.
"""

from __future__ import annotations

from dataclasses import dataclass

import cvxpy as cp
import numpy as np
import scipy.sparse as sp

from slurm_gavel.domain.model import Allocation, PairShare, Problem, pair_lookup
from slurm_gavel.policies.solvers.lp import SolverError
from slurm_gavel.policies.solvers.mm_lp import STAGE2_SLACK
from slurm_gavel.policies.solvers.mm_pairs import pair_rates
from slurm_gavel.policies.solvers.silent_highs import absorb_banner

SOLVER = "HIGHS"


@dataclass
class JobLevelLp:
    """Per-job arrays of one problem: x is (n, K), y is (P, K) over candidate pairs."""

    throughput: np.ndarray  # (n, K)
    allowed: np.ndarray  # (n, K) bool
    scale: np.ndarray  # (n,)
    weight: np.ndarray  # (n,)
    capacity: np.ndarray  # (K,)
    pair_jobs: list[tuple[int, int]]  # candidate job pairs (i < j)
    pair_rate: np.ndarray  # (P, K, 2) steps/s of (i, j) when paired; 0 where not allowed
    pair_allowed: np.ndarray  # (P, K) bool


def job_level(problem: Problem, *, with_pairs: bool) -> JobLevelLp:
    types = problem.gpu_types
    n, k = len(problem.jobs), len(types)
    tput = np.array([[j.throughput.get(t, 0.0) for t in types] for j in problem.jobs]).reshape(n, k)
    scale = np.array([float(j.scale_factor) for j in problem.jobs])
    cap = np.array([float(problem.cluster[t]) for t in types])
    allowed = (tput > 0) & (scale[:, None] <= cap[None, :])
    pair_jobs: list[tuple[int, int]] = []
    rates: list[np.ndarray] = []
    if with_pairs:
        table = pair_lookup(problem)
        for i, a in enumerate(problem.jobs):
            for j in range(i + 1, n):
                b = problem.jobs[j]
                if a.scale_factor != b.scale_factor:
                    continue
                row = pair_rates(table, a.job_type, b.job_type, a.scale_factor)
                if row is None:
                    continue
                r = np.zeros((k, 2))
                for kk, t in enumerate(types):
                    if t in row and allowed[i, kk] and allowed[j, kk]:
                        r[kk] = row[t]
                if r.max() > 0:
                    pair_jobs.append((i, j))
                    rates.append(r)
    pair_rate = np.array(rates).reshape(len(pair_jobs), k, 2)
    return JobLevelLp(
        throughput=tput,
        allowed=allowed,
        scale=scale,
        weight=np.array([float(j.priority_weight) for j in problem.jobs]),
        capacity=cap,
        pair_jobs=pair_jobs,
        pair_rate=pair_rate,
        pair_allowed=pair_rate.max(axis=2) > 0,
    )


def _masked(shape: tuple[int, int], allowed: np.ndarray) -> tuple[cp.Variable, list[cp.Constraint]]:
    v = cp.Variable(shape, nonneg=True)
    cons = [cp.multiply(1.0 - allowed, v) == 0] if shape[0] and not allowed.all() else []
    return v, cons


def solve_reference(
    problem: Problem,
    policy: str,
    lp: JobLevelLp,
    single_gain: np.ndarray,
    pair_gain: np.ndarray,
    *,
    objective: str = "max_min",
    second_stage: bool = True,
) -> Allocation:
    """Job-level LP. `single_gain` (n, K) and `pair_gain` (P, K, 2): value per unit of time.

    objective "max_min": maximise the minimum value over jobs that can run, then
    (second_stage) the total value with the minimum held; "sum": maximise the total.
    """
    n, k = lp.throughput.shape
    if n == 0:
        return Allocation(policy, {}, [], objective=0.0)
    npair = len(lp.pair_jobs)
    x, cons = _masked((n, k), lp.allowed)
    value = cp.sum(cp.multiply(single_gain, x), axis=1)
    time = cp.sum(x, axis=1)
    gpus = lp.scale @ x
    if npair:
        y, pc = _masked((npair, k), lp.pair_allowed)
        cons += pc
        rows = np.array([p for pair in lp.pair_jobs for p in pair])
        cols = np.repeat(np.arange(npair), 2)
        inc = sp.csr_matrix((np.ones(2 * npair), (rows, cols)), shape=(n, npair))
        time = time + inc @ cp.sum(y, axis=1)
        side_a = sp.csr_matrix((np.ones(npair), (rows[0::2], np.arange(npair))), (n, npair))
        side_b = sp.csr_matrix((np.ones(npair), (rows[1::2], np.arange(npair))), (n, npair))
        value = value + side_a @ cp.sum(cp.multiply(pair_gain[:, :, 0], y), axis=1)
        value = value + side_b @ cp.sum(cp.multiply(pair_gain[:, :, 1], y), axis=1)
        pair_scale = np.array([lp.scale[i] for i, _ in lp.pair_jobs])
        gpus = gpus + pair_scale @ y
    cons += [time <= 1, gpus <= lp.capacity]
    runnable = np.asarray(lp.allowed.any(axis=1))
    for i, j in lp.pair_jobs:
        runnable[i] = runnable[j] = True
    idx = np.nonzero(runnable)[0]

    if objective == "sum":
        _solve(cp.Problem(cp.Maximize(cp.sum(value)), cons))
    elif len(idx):
        z = cp.min(value[idx])
        _solve(cp.Problem(cp.Maximize(z), cons))
        if second_stage:
            z_star = float(z.value)
            held = [value[idx] >= z_star * (1 - STAGE2_SLACK)]
            try:
                _solve(cp.Problem(cp.Maximize(cp.sum(value)), cons + held))
            except SolverError:
                _solve(cp.Problem(cp.Maximize(z), cons))
    xv = np.clip(x.value if x.value is not None else np.zeros((n, k)), 0.0, 1.0)
    fractions = {
        job.id: {t: float(xv[i, kk]) for kk, t in enumerate(problem.gpu_types)}
        for i, job in enumerate(problem.jobs)
    }
    pairs: list[PairShare] = []
    if npair:
        yv = np.clip(np.asarray(y.value), 0.0, None)
        for p, (i, j) in enumerate(lp.pair_jobs):
            if yv[p].max() > 1e-12:
                share = {t: float(yv[p, kk]) for kk, t in enumerate(problem.gpu_types)}
                pairs.append(PairShare((problem.jobs[i].id, problem.jobs[j].id), share))
    vals = np.asarray(value.value).reshape(-1) if n else np.zeros(0)
    obj = float(vals[idx].min()) if len(idx) else 0.0
    if objective == "sum":
        obj = float(vals.sum())
    return Allocation(policy, fractions, pairs, objective=obj)


def _solve(prob: cp.Problem) -> None:
    absorb_banner()  # cvxpy makes a highspy.Highs: its banner must not reach stdout
    prob.solve(solver=SOLVER, verbose=False)
    if prob.status != cp.OPTIMAL:
        raise SolverError(f"reference LP ({SOLVER}) ended with status '{prob.status}'")
