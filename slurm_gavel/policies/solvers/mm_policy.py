"""The max-min fairness family, shared by its three policy modules.

Objective (docs/design.md §2.2): maximise min_j s_j * rate_j / (w_j * P_j), where rate_j is
the job's average steps/s (alone and, with space sharing, its side of each pair)
and P_j = sum_t T_jt cap_t / sum_t cap_t. Jobs that cannot run anywhere (zero
throughput on every type that has room for them) are left out of the minimum,
with a note, instead of pinning it at 0 for everyone.

Fast path: classes (classes.py) -> class LP (mm_lp.py) -> jobs and job pairs
(mm_disaggregate.py). Reference path (options.reference): job-level cvxpy LP
(mm_reference.py). Both run the same two stages (max the min, then the total
normalised throughput with the min held).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from slurm_gavel.domain.model import Allocation, Problem
from slurm_gavel.policies import PolicyOptions
from slurm_gavel.policies.solvers import mm_pack_groups
from slurm_gavel.policies.solvers.agnostic_split import spread_by_capacity
from slurm_gavel.policies.solvers.classes import JobClasses, fairness_coefficients, group_jobs
from slurm_gavel.policies.solvers.mm_disaggregate import job_fractions, pair_shares
from slurm_gavel.policies.solvers.mm_lp import PairVars, solve_max_min_classes
from slurm_gavel.policies.solvers.mm_pairs import class_pair_vars


def agnostic_throughput(throughput: np.ndarray) -> np.ndarray:
    """Every type the job can run on counts as 1 step/s: a type-blind view."""
    return (throughput > 0).astype(np.float64)


def agnostic_problem(problem: Problem) -> Problem:
    """The problem as a type-blind policy sees it: 1 step/s wherever a job runs at all.

    Grouping this problem's jobs puts every pair of jobs the type-blind LP cannot
    tell apart into one class, so they get the same time (a vertex of the LP could
    otherwise give one more than the other).
    """
    jobs = tuple(
        replace(j, throughput={t: 1.0 if v > 0 else 0.0 for t, v in j.throughput.items()})
        for j in problem.jobs
    )
    return replace(problem, jobs=jobs)


def allocate_max_min(
    problem: Problem, options: PolicyOptions, policy: str, *, agnostic: bool, packed: bool
) -> Allocation:
    if options.reference:
        return _reference(
            problem, policy, agnostic=agnostic, packed=packed, second_stage=options.second_stage
        )
    classes = group_jobs(agnostic_problem(problem) if agnostic else problem, by_job_type=packed)
    tput = agnostic_throughput(classes.throughput) if agnostic else classes.throughput
    coef = fairness_coefficients(classes, tput)
    if packed and not agnostic and classes.n_classes >= mm_pack_groups.GROUP_MIN_CLASSES:
        return _packed_groups(problem, options, policy, classes, coef)
    pairs = class_pair_vars(problem, classes, tput) if packed else PairVars.empty()
    sol = solve_max_min_classes(
        coef,
        classes.allowed(),
        classes.scale,
        classes.count,
        classes.capacity,
        pairs,
        time_limit=options.time_limit,
        second_stage=options.second_stage,
    )
    x = sol.x
    if agnostic and not packed:  # the symmetric point of the type-blind optimum
        x = spread_by_capacity(
            x, classes.allowed(), classes.count * classes.scale, classes.count, classes.capacity
        )
    alloc = Allocation(
        policy,
        job_fractions(problem, classes, x),
        pair_shares(problem, classes, pairs, sol.y) if packed else [],
        objective=sol.objective,
    )
    alloc.notes.extend(_unrunnable_notes(problem, classes, sol.runnable))
    return alloc


def _packed_groups(
    problem: Problem, options: PolicyOptions, policy: str, classes: JobClasses, coef: np.ndarray
) -> Allocation:
    """Many classes: pair time per partner group (mm_pack_groups.py), the same optimum."""
    sol = mm_pack_groups.solve_packed_groups(
        problem, classes, coef, second_stage=options.second_stage, time_limit=options.time_limit
    )
    alloc = Allocation(
        policy, job_fractions(problem, classes, sol.x), sol.pairs, objective=sol.objective
    )
    alloc.notes.extend(_unrunnable_notes(problem, classes, sol.runnable))
    return alloc


def _unrunnable_notes(problem: Problem, classes: JobClasses, runnable: np.ndarray) -> list[str]:
    stuck = [problem.jobs[i].id for c in np.nonzero(~runnable)[0] for i in classes.members[c]]
    if not stuck:
        return []
    shown = ", ".join(stuck[:10]) + (" ..." if len(stuck) > 10 else "")
    return [
        f"{len(stuck)} job(s) cannot run on any GPU type with room for them and are "
        f"left out of the max-min objective: {shown}"
    ]


def _reference(
    problem: Problem, policy: str, *, agnostic: bool, packed: bool, second_stage: bool
) -> Allocation:
    # Imported here: cvxpy takes ~1 s to import, which every simulator run and daemon
    # start would otherwise pay for a path only tests and benchmarks use.
    from slurm_gavel.policies.solvers.mm_reference import job_level, solve_reference

    lp = job_level(problem, with_pairs=packed)
    tput = agnostic_throughput(lp.throughput) if agnostic else lp.throughput
    cap = lp.capacity
    p = tput @ cap / cap.sum()  # P_j, per job
    norm = np.where(p > 0, lp.scale / (lp.weight * np.where(p > 0, p, 1.0)), 0.0)
    single = np.where(lp.allowed, norm[:, None] * tput, 0.0)
    pair_gain = np.zeros_like(lp.pair_rate)
    for q, (i, j) in enumerate(lp.pair_jobs):
        pair_gain[q, :, 0] = norm[i] * lp.pair_rate[q, :, 0]
        pair_gain[q, :, 1] = norm[j] * lp.pair_rate[q, :, 1]
    alloc = solve_reference(problem, policy, lp, single, pair_gain, second_stage=second_stage)
    if agnostic and not packed and problem.jobs:  # the same symmetric point, per job
        types = problem.gpu_types
        x = np.array([[alloc.fractions[j.id][t] for t in types] for j in problem.jobs])
        x = spread_by_capacity(x, lp.allowed, lp.scale, np.ones(len(problem.jobs)), cap)
        alloc.fractions = {
            j.id: dict(zip(types, map(float, row), strict=True))
            for j, row in zip(problem.jobs, x, strict=True)
        }
    return alloc
