"""max_min_fairness_agnostic returns the symmetric point of its optimal face.

The type-blind LP values only each job's total time, so any split over types is
optimal; a simplex solver returns a vertex (each job on one type, by column
order). The policy instead splits each job's total over the types it can use in
proportion to their capacity (agnostic_split.py), or, where that overfills a
type, takes the feasible split closest to it.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from slurm_gavel.domain.model import Problem
from slurm_gavel.policies import PolicyOptions, allocate
from slurm_gavel.policies.solvers.agnostic_split import spread_by_capacity
from slurm_gavel.simulate.synthetic import random_problem

NAME = "max_min_fairness_agnostic"


def rows(alloc, types) -> np.ndarray:
    return np.array([[alloc.fractions[j][t] for t in types] for j in alloc.fractions])


@pytest.mark.parametrize("reference", [False, True])
def test_every_job_spread_over_every_type_in_proportion_to_capacity(make_problem, reference):
    # 40 single-GPU jobs of 4 different speeds on 6 + 12 + 18 GPUs (overloaded): each
    # gets 36/40 of the time, split 1:2:3 (a vertex puts each job on one type).
    cluster = {"v": 6, "p": 12, "k": 18}
    speeds = [{"v": 4, "p": 2, "k": 1}, {"v": 1, "p": 1, "k": 1}, {"v": 9, "p": 3, "k": 2},
              {"v": 2, "p": 5, "k": 1}]  # fmt: skip
    p = make_problem(cluster, [("A", speeds[i % 4], 1, 1) for i in range(40)])
    alloc = allocate(p, NAME, PolicyOptions(reference=reference))
    x = rows(alloc, list(cluster))
    np.testing.assert_allclose(x, np.tile([0.9 / 6, 0.9 / 3, 0.9 / 2], (40, 1)), atol=1e-7)
    assert alloc.violations(p) == []


def test_light_load_gives_every_job_all_its_time_spread_by_capacity(make_problem):
    cluster = {"v": 12, "p": 12, "k": 12}
    p = make_problem(cluster, [("A", {"v": 3, "p": 2, "k": 1}, s, 1) for s in (1, 2, 4, 8)])
    x = rows(allocate(p, NAME), list(cluster))
    np.testing.assert_allclose(x, np.full((4, 3), 1 / 3), atol=1e-9)


def test_the_split_does_not_depend_on_the_order_types_are_listed(make_problem):
    jobs = [("A", {"v": 3, "p": 2, "k": 1}, 1 + i % 2, 1) for i in range(30)]
    a = allocate(make_problem({"v": 8, "p": 4, "k": 12}, jobs), NAME)
    b = allocate(make_problem({"k": 12, "p": 4, "v": 8}, jobs), NAME)
    for j in a.fractions:
        for t in ("v", "p", "k"):
            assert a.fractions[j][t] == pytest.approx(b.fractions[j][t], abs=1e-9)


def test_jobs_the_blind_lp_cannot_tell_apart_get_the_same_row(make_problem):
    # Different speeds, same support, size and weight: one class to the agnostic LP.
    p = make_problem({"v": 3, "k": 2}, [("A", {"v": 1 + i, "k": 1}, 1, 1) for i in range(7)])
    x = rows(allocate(p, NAME), ["v", "k"])
    np.testing.assert_allclose(x, np.tile([3 / 7, 2 / 7], (7, 1)), atol=1e-9)


def test_where_proportional_overfills_a_type_the_closest_feasible_split(make_problem):
    # A1 and A2 run only on v (their k throughput is 0); B, C, D anywhere. All five get
    # their whole time (6 GPUs). Proportional would put B, C, D half on v: 2 + 1.5 > 3.
    # The closest split keeps A on v and spreads the one v left over B, C, D alike.
    anywhere = {"v": 1, "k": 1}
    p = make_problem({"v": 3, "k": 3}, [("A", {"v": 1}, 1, 1)] * 2 + [("B", anywhere, 1, 1)] * 3)
    for reference in (False, True):
        alloc = allocate(p, NAME, PolicyOptions(reference=reference))
        x = rows(alloc, ["v", "k"])
        np.testing.assert_allclose(x[:2], [[1, 0], [1, 0]], atol=1e-6)
        np.testing.assert_allclose(x[2:], np.tile([1 / 3, 2 / 3], (3, 1)), atol=1e-6)
        assert alloc.violations(p) == []


def test_a_job_too_big_for_a_type_is_spread_over_the_others_only(make_problem):
    # The 4-GPU job cannot use p (2 GPUs): its share is v:k = 4:8.
    p = make_problem({"v": 4, "p": 2, "k": 8}, [("A", {"v": 3, "p": 2, "k": 1}, 4, 1)])
    x = rows(allocate(p, NAME), ["v", "p", "k"])
    np.testing.assert_allclose(x, [[1 / 3, 0, 2 / 3]], atol=1e-9)


@pytest.mark.parametrize("seed", range(12))
def test_random_problems_same_totals_and_objective_as_the_lp_and_feasible(seed):
    # The re-split keeps each class's total time, so the type-blind objective is the
    # LP's (the reference path agrees), and it is feasible.
    rng = np.random.default_rng(seed)
    gpus = {"v100": int(rng.integers(1, 9)), "p100": int(rng.integers(0, 9)),
            "k80": int(rng.integers(1, 9))}  # fmt: skip
    p = random_problem(int(rng.integers(2, 60)), gpus, seed=seed, multi_gpu=seed % 2 == 0)
    if seed % 3 == 0:  # some jobs that cannot run on some types
        jobs = tuple(
            dataclasses.replace(j, throughput={**j.throughput, "k80": 0.0}) if i % 4 == 0 else j
            for i, j in enumerate(p.jobs)
        )
        p = dataclasses.replace(p, jobs=jobs)
    alloc = allocate(p, NAME)
    ref = allocate(p, NAME, PolicyOptions(reference=True))
    assert alloc.violations(p) == [] and ref.violations(p) == []
    assert alloc.objective == pytest.approx(ref.objective, rel=1e-6)


def test_spread_keeps_totals_and_matches_target_when_it_fits():
    x = np.array([[0.6, 0.0, 0.0], [0.0, 0.0, 0.9], [0.2, 0.2, 0.0]])
    allowed = np.array([[True, True, True], [True, False, True], [True, True, False]])
    cap = np.array([4.0, 2.0, 2.0])
    out = spread_by_capacity(x, allowed, np.ones(3), np.ones(3), cap)
    np.testing.assert_allclose(out.sum(axis=1), x.sum(axis=1))
    np.testing.assert_allclose(out[1], [0.9 * 4 / 6, 0.0, 0.9 * 2 / 6])
    np.testing.assert_allclose(out[2], [0.4 * 4 / 6, 0.4 * 2 / 6, 0.0])


def test_problem_without_jobs(make_problem):
    p: Problem = make_problem({"v": 2}, [])
    assert allocate(p, NAME).fractions == {}
