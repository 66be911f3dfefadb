"""min_total_duration: exact makespan (vs hand-solved cases, vs an independent dense LP,
vs a fine bisection like Gavel's), feasibility, fast path == cvxpy reference."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from policy_strategies import (
    against_reference,
    against_solvers,
    assert_needs_steps_remaining,
    problems_with_steps,
)
from scipy.optimize import linprog

from slurm_gavel.domain.model import Allocation, Problem, ProblemJob
from slurm_gavel.policies import PolicyOptions, allocate
from slurm_gavel.policies.min_total_duration import makespan_of
from slurm_gavel.simulate.synthetic import random_problem

REF = PolicyOptions(reference=True)


def job(i: int, tput: dict[str, float], steps: float, sf: int = 1) -> ProblemJob:
    return ProblemJob(str(i), "t", tput, sf, 1.0, steps_remaining=steps)


def solved(cluster: dict[str, int], *jobs: ProblemJob) -> tuple[Problem, Allocation]:
    """The problem of ``jobs`` on ``cluster`` and min_total_duration's allocation."""
    p = Problem(cluster, jobs)
    return p, allocate(p, "min_total_duration")


def feasible_at(problem: Problem, makespan: float) -> bool:
    """Gavel's feasibility LP: can every job finish within `makespan`? (scipy, dense)."""
    types = problem.gpu_types
    n, k = len(problem.jobs), len(types)
    tput = np.array([[j.throughput.get(t, 0.0) for t in types] for j in problem.jobs])
    sf = np.array([j.scale_factor for j in problem.jobs], dtype=float)
    cap = np.array([problem.cluster[t] for t in types], dtype=float)
    a_ub, b_ub = [], []
    for i, j in enumerate(problem.jobs):
        row = np.zeros(n * k)
        row[i * k : (i + 1) * k] = -tput[i]
        a_ub.append(row)
        b_ub.append(-j.steps_remaining / makespan)
        row = np.zeros(n * k)
        row[i * k : (i + 1) * k] = 1.0
        a_ub.append(row)
        b_ub.append(1.0)
    for t in range(k):
        row = np.zeros(n * k)
        row[t::k] = sf
        a_ub.append(row)
        b_ub.append(cap[t])
    bounds = [
        (0, 0 if tput[i, t] == 0 or sf[i] > cap[t] else None) for i in range(n) for t in range(k)
    ]
    res = linprog(np.zeros(n * k), A_ub=np.array(a_ub), b_ub=b_ub, bounds=bounds, method="highs")
    return res.status == 0


def bisect(problem: Problem, lo: float, hi: float, rel: float) -> float:
    while hi > lo * (1 + rel):
        mid = 0.5 * (lo + hi)
        lo, hi = (lo, mid) if feasible_at(problem, mid) else (mid, hi)
    return hi


def test_one_gpu_two_jobs_share_in_proportion_to_work():
    p = Problem({"v": 1}, (job(0, {"v": 1.0}, 100), job(1, {"v": 1.0}, 200)))
    for opts in (PolicyOptions(), REF):
        a = allocate(p, "min_total_duration", opts)
        assert a.objective == pytest.approx(300.0, rel=1e-9)
        assert a.fractions["0"]["v"] == pytest.approx(1 / 3, rel=1e-7)
        assert a.fractions["1"]["v"] == pytest.approx(2 / 3, rel=1e-7)


def test_two_types_hand_solved():
    # A: 2 steps/s on v, 1 on k; B: 1 on both; one GPU each; 120 steps each.
    # Optimum: A gets all of v and some k ... solve: A: 2 a_v + a_k, B: b_v + b_k, with
    # a_v + b_v <= 1, a_k + b_k <= 1, each job's time <= 1. Best: A on v (2/s), B on k
    # (1/s): makespan max(60, 120) = 120; moving k-time from B to A does not help B, and
    # B on v instead of A costs A more: the optimum is 120 s with B alone on k.
    p, a = solved(
        {"v": 1, "k": 1}, job(0, {"v": 2.0, "k": 1.0}, 120), job(1, {"v": 1.0, "k": 1.0}, 120)
    )
    assert a.objective == pytest.approx(120.0, rel=1e-9)
    assert a.effective_throughput(p, "1") == pytest.approx(1.0, rel=1e-7)


def test_exact_versus_fine_bisection_and_gavels_five_percent():
    p = random_problem(12, 3, seed=4)
    a = allocate(p, "min_total_duration")
    assert not a.violations(p)
    exact = bisect(p, a.objective * 0.5, a.objective * 2.0, 1e-7)
    assert a.objective == pytest.approx(exact, rel=2e-7)
    assert not feasible_at(p, a.objective * (1 - 1e-6))  # nothing better exists
    gavel = bisect(p, a.objective * 0.3, a.objective * 3.0, 0.05)  # Gavel's stopping rule
    assert gavel >= a.objective * (1 - 1e-9)


@pytest.mark.parametrize("seed", range(4))
def test_fast_equals_reference(seed):
    p = random_problem(25, 6, seed=seed)
    fast, _ = against_reference(p, "min_total_duration", rel=1e-6)
    assert makespan_of(p, fast) == pytest.approx(fast.objective, rel=1e-9)
    assert not fast.violations(p)


def test_unrunnable_and_finished_jobs():
    _, a = solved(
        {"v": 2},
        job(0, {"v": 1.0}, 100),
        job(1, {"v": 0.0}, 100),  # cannot run here
        job(2, {"v": 1.0}, 0),  # done
        job(3, {"v": 1.0}, 100, sf=4),  # does not fit
    )
    assert a.objective == pytest.approx(100.0, rel=1e-9)
    assert sum(a.fractions["1"].values()) == 0 and sum(a.fractions["3"].values()) == 0
    assert any("1, 3" in n for n in a.notes)


def test_missing_steps_remaining_is_an_input_error():
    assert_needs_steps_remaining("min_total_duration")


@against_solvers(40)
@given(problems_with_steps([0.0, 10.0, 100.0, 1000.0, 5e4], max_jobs=8))
def test_property_feasible_and_optimal(assert_work_conserving, p):
    fast = allocate(p, "min_total_duration")
    assert fast.violations(p) == []
    assert_work_conserving(p, fast)
    for j in p.jobs:
        for t, x in fast.fractions[j.id].items():
            if j.throughput.get(t, 0.0) == 0 or j.scale_factor > p.cluster[t]:
                assert x == 0.0
    ref = allocate(p, "min_total_duration", REF)
    assert fast.objective == pytest.approx(ref.objective, rel=1e-6, abs=1e-9)
    assert makespan_of(p, fast) == pytest.approx(fast.objective, rel=1e-9, abs=1e-9)


def test_spare_gpus_are_handed_out_without_changing_the_makespan():
    # A (only on v) sets the makespan at 100 s; B needs just 10% of k for that, but
    # gets all of k: idle GPUs help nobody.
    p, a = solved(
        {"v": 1, "k": 1}, job(0, {"v": 1.0, "k": 0.0}, 100), job(1, {"v": 1.0, "k": 1.0}, 10)
    )
    assert a.objective == pytest.approx(100.0, rel=1e-9)
    assert a.gpus_used(p) == pytest.approx({"v": 1.0, "k": 1.0})
