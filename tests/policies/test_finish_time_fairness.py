"""finish_time_fairness: Gavel's isolated share, hand-solved optima, rho of the result ==
the reported objective, fast path == Clarabel reference, feasibility."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from policy_strategies import (
    against_reference,
    against_solvers,
    assert_needs_steps_remaining,
    problems_with_steps,
)

from slurm_gavel.domain.model import Problem, ProblemJob
from slurm_gavel.policies import PolicyOptions, allocate
from slurm_gavel.policies.finish_time_fairness import (
    accumulate_isolated_time,
    isolated_throughput,
    rho_of,
    solve,
)
from slurm_gavel.policies.solvers.classes import job_arrays
from slurm_gavel.simulate.synthetic import random_problem

REF = PolicyOptions(reference=True)


def job(i, tput, steps, since=0.0, sf=1) -> ProblemJob:
    return ProblemJob(str(i), "t", tput, sf, 1.0, steps_remaining=steps, time_since_start=since)


def test_isolated_share_is_gavels():
    # n = 2 jobs, cap v=4, k=2: share = (4/2, 2/2) / s = (2, 1) for s=1, row sum 3 -> /3.
    # For s=2: (1, 0.5), row sum 1.5 -> /1.5.
    p = Problem(
        {"v": 4, "k": 2},
        (job(0, {"v": 3.0, "k": 1.0}, 10), job(1, {"v": 3.0, "k": 1.0}, 10, sf=2)),
    )
    iso = isolated_throughput(job_arrays(p))
    assert iso[0] == pytest.approx(3.0 * 2 / 3 + 1.0 * 1 / 3)
    assert iso[1] == pytest.approx(3.0 * 1 / 1.5 + 1.0 * 0.5 / 1.5)


def test_isolated_allocation_gives_rho_one_so_optimum_is_at_most_one():
    p = random_problem(15, 4, seed=3)
    a = allocate(p, "finish_time_fairness")
    assert 0 < a.objective <= 1 + 1e-9


def test_hand_solved_with_cumulative_isolated_time():
    # One GPU, T = 1, 100 steps each, n = 2: I = 1/2, so R / I = 200 s for both.
    # Job 0 just started (A = 0, C = 0): rho0 = (100 / x0) / 200 = 1 / (2 x0).
    # Job 1 waited 100 s without progress (A = 100, C = 0): rho1 = (100 + 100/x1) / 200.
    # Equal at x0 + x1 = 1: x0^2 - 3 x0 + 1 = 0, x0 = (3 - sqrt 5) / 2, rho = 1 / (2 x0).
    p = Problem({"v": 1}, (job(0, {"v": 1.0}, 100), job(1, {"v": 1.0}, 100, since=100.0)))
    x0 = (3 - math.sqrt(5)) / 2
    a = solve(p, PolicyOptions(), {"0": 0.0, "1": 0.0})
    assert a.objective == pytest.approx(1 / (2 * x0), rel=1e-8)
    assert a.fractions["0"]["v"] == pytest.approx(x0, rel=1e-6)
    assert a.fractions["1"]["v"] == pytest.approx(1 - x0, rel=1e-6)
    rhos = rho_of(p, a, {"0": 0.0, "1": 0.0})
    assert max(rhos.values()) == pytest.approx(a.objective, rel=1e-9)


def test_job_that_fits_nowhere_fast_waits_for_its_best_type():
    # Job 0 runs only on k; job 1 on both (v faster). FTF gives k to job 0.
    p = Problem(
        {"v": 1, "k": 1},
        (job(0, {"v": 0.0, "k": 1.0}, 100), job(1, {"v": 4.0, "k": 1.0}, 100)),
    )
    fast, _ = against_reference(p, "finish_time_fairness", rel=1e-5)
    assert fast.fractions["0"]["v"] == 0.0


@pytest.mark.parametrize("seed", range(4))
def test_fast_equals_reference_and_rho_matches_objective(seed):
    p = random_problem(20, 5, seed=seed)
    # Clarabel is an interior-point solver: its optimum is good to ~1e-7 relative.
    fast, ref = against_reference(p, "finish_time_fairness", rel=1e-6)
    assert fast.objective <= ref.objective * (1 + 1e-9)
    assert max(rho_of(p, fast).values()) == pytest.approx(fast.objective, rel=1e-12)
    assert not fast.violations(p)


def test_excluded_jobs_are_named():
    p = Problem(
        {"v": 1},
        (job(0, {"v": 1.0}, 100), job(1, {"v": 0.0}, 100), job(2, {"v": 1.0}, 0.0, since=5)),
    )
    a = allocate(p, "finish_time_fairness")
    assert any("cannot run" in n and ": 1" in n for n in a.notes)
    assert any("no steps left" in n and ": 2" in n for n in a.notes)
    assert a.fractions["1"]["v"] == 0.0


def test_missing_steps_remaining_is_an_input_error():
    assert_needs_steps_remaining("finish_time_fairness")


@against_solvers(30)
@given(problems_with_steps([0.0, 10.0, 1000.0, 5e4], since=[0.0, 60.0, 3600.0]))
def test_property_feasible_optimal_and_consistent(assert_work_conserving, p):
    fast = allocate(p, "finish_time_fairness")
    assert fast.violations(p) == []
    assert_work_conserving(p, fast)
    rhos = rho_of(p, fast)
    if rhos:
        assert max(rhos.values()) == pytest.approx(fast.objective, rel=1e-9)
        ref = allocate(p, "finish_time_fairness", REF)
        assert fast.objective <= ref.objective * (1 + 1e-6)
        assert fast.objective == pytest.approx(ref.objective, rel=1e-5)
    else:
        assert not np.any([sum(r.values()) for r in fast.fractions.values()])


def test_cumulative_isolated_time_follows_gavels_update():
    # Round 1: two jobs on one GPU, I = 1/2 each. By round 2 job 0 made 30 steps,
    # job 1 none, and job 2 arrived: C_0 = 30 / (1/2) = 60, C_1 = 0, C_2 = 0.
    r1 = Problem({"v": 1}, (job(0, {"v": 1.0}, 100), job(1, {"v": 1.0}, 100)))
    r2 = Problem(
        {"v": 1},
        (job(0, {"v": 1.0}, 70, 60.0), job(1, {"v": 1.0}, 100, 60.0), job(2, {"v": 1.0}, 50)),
    )
    cum = accumulate_isolated_time({}, r1, r2)
    assert cum == pytest.approx({"0": 60.0, "1": 0.0, "2": 0.0})
    # Job 1 (no progress in 60 s) now has the larger rho under Gavel's C_j: FTF favours it.
    a = solve(r2, PolicyOptions(), cum)
    assert a.fractions["1"]["v"] > a.fractions["0"]["v"]
    rhos = rho_of(r2, a, cum)
    assert max(rhos.values()) == pytest.approx(a.objective, rel=1e-9)
