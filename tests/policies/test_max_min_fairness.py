"""max_min_fairness and _agnostic: analytical optima, fast path == reference, properties."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from scipy.optimize import linprog

from slurm_gavel.domain.model import Problem
from slurm_gavel.policies import PolicyOptions, allocate
from slurm_gavel.policies.solvers.classes import fairness_coefficients, group_jobs
from slurm_gavel.policies.solvers.mm_lp import solve_max_min_classes
from slurm_gavel.simulate.synthetic import random_problem

REF = PolicyOptions(reference=True)


def both(problem: Problem, name: str):
    return allocate(problem, name), allocate(problem, name, REF)


# ---- analytical optima ------------------------------------------------------------


@pytest.mark.parametrize(
    ("cluster", "jobs", "z", "x"),
    [
        # value_j = x_j / w_j; x_1 + x_2 <= 1  =>  z* = 1 / (w_1 + w_2), x_j = w_j z*.
        ({"v": 1}, [("A", {"v": 2.0}, 1, 1.0), ("B", {"v": 5.0}, 1, 3.0)], 0.25, [0.25, 0.75]),
        # value = s x: max min(2 x_A, x_B) s.t. 2 x_A + x_B <= 2, x <= 1  =>  z* = 1.
        ({"v": 2}, [("A", {"v": 1.0}, 2, 1.0), ("B", {"v": 1.0}, 1, 1.0)], 1.0, [0.5, 1.0]),
    ],
    ids=["two_jobs_split_by_weight", "a_multi_gpu_job_counts_its_scale_factor"],
)
def test_one_type_optima(make_problem, cluster, jobs, z, x) -> None:
    p = make_problem(cluster, jobs)
    for alloc in both(p, "max_min_fairness"):
        assert alloc.objective == pytest.approx(z, rel=1e-7)
        assert [alloc.fractions[j]["v"] for j in ("0", "1")] == pytest.approx(x, rel=1e-6)


def test_heterogeneity_aware_optimum_is_three_quarters(
    make_problem, normalised_values, runnable_min
) -> None:
    # A runs 3x faster on v; B and C are indifferent. P_A = 2, P_B = P_C = 1.
    # Bound: (2/3) z <= a_v + a_k/3 and 2z <= 2 b_v + 2 b_k; summing with the two
    # capacities gives (8/3) z <= 2, so z <= 3/4, reached by a_v = 1/2, b_k = 1/2, b_v = 1/4.
    p = make_problem(
        {"v": 1, "k": 1},
        [("A", {"v": 3, "k": 1}, 1, 1)] + [("B", {"v": 1, "k": 1}, 1, 1)] * 2,
    )
    for alloc in both(p, "max_min_fairness"):
        assert alloc.objective == pytest.approx(0.75, rel=1e-7)
        assert runnable_min(p, normalised_values(p, alloc)) == pytest.approx(0.75, rel=1e-6)
        assert alloc.violations(p) == []


def test_agnostic_ignores_speed_differences(make_problem) -> None:
    # Type-blind, A's 3x speed on v is invisible: the same problem with A indifferent
    # gives the same objective and the same allocation up to ties.
    same = {"v": 1, "k": 1}
    jobs = [("A", {"v": 3, "k": 1}, 1, 1), ("B", same, 1, 1), ("C", same, 1, 1)]
    fast = make_problem({"v": 1, "k": 1}, jobs)
    flat = make_problem({"v": 1, "k": 1}, [("A", {"v": 1, "k": 1}, 1, 1), *jobs[1:]])
    a, b = allocate(fast, "max_min_fairness_agnostic"), allocate(flat, "max_min_fairness_agnostic")
    assert a.objective == pytest.approx(b.objective, rel=1e-9)
    assert a.objective == pytest.approx(2 / 3, rel=1e-7)  # 2 GPUs over 3 equal jobs
    # ... while the aware policy does see it.
    assert allocate(fast, "max_min_fairness").objective > 0.7


def test_agnostic_ignores_throughput_scaling_on_random_problems() -> None:
    for seed in range(5):
        p = random_problem(20, 4, seed=seed)
        rng = np.random.default_rng(seed)
        jobs = tuple(
            dataclasses.replace(
                j, throughput={t: v * float(rng.uniform(0.1, 10)) for t, v in j.throughput.items()}
            )
            for j in p.jobs
        )
        q = dataclasses.replace(p, jobs=jobs)
        a = allocate(p, "max_min_fairness_agnostic").objective
        b = allocate(q, "max_min_fairness_agnostic").objective
        assert a == pytest.approx(b, rel=1e-7)


def test_job_that_cannot_run_anywhere_is_left_out_with_a_note(make_problem) -> None:
    # Job 1 needs 4 GPUs; the only type it runs on has 2. Job 0 alone: x = 1 on v,
    # P = 1 * 2 / 10, so its value (and the objective) is 5.
    p = make_problem({"v": 2, "k": 8}, [("A", {"v": 1}, 1, 1), ("B", {"v": 1}, 4, 1)])
    for alloc in both(p, "max_min_fairness"):
        assert alloc.objective == pytest.approx(5.0, rel=1e-7)
        assert sum(alloc.fractions["1"].values()) == 0.0
    assert any("left out" in n for n in allocate(p, "max_min_fairness").notes)


# ---- independent solver on small problems ------------------------------------------


def dense_max_min(problem: Problem) -> float:
    """The job-level LP written out densely for scipy's linprog: an independent check."""
    types = problem.gpu_types
    n, k = len(problem.jobs), len(types)
    cap = np.array([problem.cluster[t] for t in types], dtype=float)
    nv = n * k + 1  # x (row-major) then z
    c = np.zeros(nv)
    c[-1] = -1.0
    a_ub, b_ub = [], []
    bounds = []
    for i, j in enumerate(problem.jobs):
        tput = np.array([j.throughput[t] for t in types])
        p = tput @ cap / cap.sum()
        row = np.zeros(nv)
        row[i * k : (i + 1) * k] = -j.scale_factor * tput / (j.priority_weight * p)
        row[-1] = 1.0
        a_ub.append(row)
        b_ub.append(0.0)
        row = np.zeros(nv)
        row[i * k : (i + 1) * k] = 1.0
        a_ub.append(row)
        b_ub.append(1.0)
        for kk in range(k):
            ok = tput[kk] > 0 and j.scale_factor <= cap[kk]
            bounds.append((0.0, 1.0 if ok else 0.0))
    for kk in range(k):
        row = np.zeros(nv)
        for i, j in enumerate(problem.jobs):
            row[i * k + kk] = j.scale_factor
        a_ub.append(row)
        b_ub.append(cap[kk])
    bounds.append((0.0, None))
    res = linprog(c, A_ub=np.array(a_ub), b_ub=np.array(b_ub), bounds=bounds, method="highs-ipm")
    assert res.status == 0
    return -res.fun


@pytest.mark.parametrize("seed", range(12))
def test_fast_path_matches_dense_linprog(seed: int) -> None:
    rng = np.random.default_rng(seed)
    p = random_problem(int(rng.integers(1, 9)), int(rng.integers(1, 5)), seed=seed,
                       weights=(1.0, 2.0, 0.5))  # fmt: skip
    if any(not any(v > 0 and j.scale_factor <= p.cluster[t] for t, v in j.throughput.items())
           for j in p.jobs):  # fmt: skip
        pytest.skip("a job cannot run: the dense LP has no such exclusion")
    assert allocate(p, "max_min_fairness").objective == pytest.approx(dense_max_min(p), rel=1e-6)


# ---- fast path == reference ----------------------------------------------------------


@pytest.mark.parametrize("name", ["max_min_fairness", "max_min_fairness_agnostic"])
@pytest.mark.parametrize("seed", range(15))
def test_fast_path_matches_reference(name: str, seed: int, normalised_values, runnable_min) -> None:
    rng = np.random.default_rng(100 + seed)
    gpus = {"v100": int(rng.integers(1, 9)), "p100": int(rng.integers(0, 9)),
            "k80": int(rng.integers(1, 9))}  # fmt: skip
    p = random_problem(int(rng.integers(2, 60)), gpus, seed=seed, multi_gpu=seed % 3 != 0,
                       weights=(1.0, 1.0, 2.0))  # fmt: skip
    fast, ref = both(p, name)
    assert fast.objective == pytest.approx(ref.objective, rel=1e-6)
    assert fast.violations(p) == [] and ref.violations(p) == []
    agnostic = name.endswith("agnostic")
    # The reported objective is what the allocation really gives ...
    got = runnable_min(p, normalised_values(p, fast, agnostic=agnostic))
    assert got == pytest.approx(fast.objective, rel=1e-6)
    # ... and stage 2 reaches the same total normalised throughput on both paths.
    tot_fast = sum(normalised_values(p, fast, agnostic=agnostic).values())
    tot_ref = sum(normalised_values(p, ref, agnostic=agnostic).values())
    assert tot_fast == pytest.approx(tot_ref, rel=1e-5)


def test_identical_jobs_get_identical_rows(make_problem) -> None:
    p = make_problem({"v": 3, "k": 2}, [("A", {"v": 2, "k": 1}, 1, 1)] * 7)
    alloc = allocate(p, "max_min_fairness")
    rows = {tuple(round(x, 12) for x in alloc.fractions[j.id].values()) for j in p.jobs}
    assert len(rows) == 1
    # P = (2*3 + 1*2)/5 = 8/5; each job gets 3/7 of v and 2/7 of k: rate 8/7, value 5/7.
    assert alloc.objective == pytest.approx(5 / 7, rel=1e-7)


# ---- second stage ---------------------------------------------------------------------


def test_second_stage_hands_out_capacity_the_minimum_does_not_need(make_problem) -> None:
    # B is capped at value 1 by its row; A can use all the rest.
    p = make_problem({"v": 4}, [("A", {"v": 1}, 2, 1), ("B", {"v": 1}, 1, 1)])
    alloc = allocate(p, "max_min_fairness")
    assert alloc.objective == pytest.approx(1.0, rel=1e-7)
    used = alloc.gpus_used(p)["v"]
    assert used == pytest.approx(3.0, rel=1e-7)  # A: 2 GPUs all the time, B: 1


def test_second_stage_can_be_turned_off_for_ablations(make_problem) -> None:
    """PolicyOptions(second_stage=False): Gavel's single LP, same minimum, fast path and
    reference alike; it may leave the capacity of the case above idle."""
    p = make_problem({"v": 4}, [("A", {"v": 1}, 2, 1), ("B", {"v": 1}, 1, 1)])
    for reference in (False, True):
        one = allocate(
            p, "max_min_fairness", PolicyOptions(second_stage=False, reference=reference)
        )
        assert one.objective == pytest.approx(1.0, rel=1e-7)
        assert one.gpus_used(p)["v"] <= 3.0 + 1e-7
    rp = random_problem(60, 8, seed=3)
    one = allocate(rp, "max_min_fairness", PolicyOptions(second_stage=False))
    two = allocate(rp, "max_min_fairness")
    assert two.objective == pytest.approx(one.objective, rel=1e-8)
    assert sum(two.gpus_used(rp).values()) >= sum(one.gpus_used(rp).values()) - 1e-7


def test_second_stage_never_lowers_the_minimum() -> None:
    for seed in range(8):
        p = random_problem(40, 6, seed=seed)
        classes = group_jobs(p)
        coef = fairness_coefficients(classes, classes.throughput)
        args = (coef, classes.allowed(), classes.scale, classes.count, classes.capacity)
        one = solve_max_min_classes(*args, second_stage=False)
        two = solve_max_min_classes(*args, second_stage=True)
        assert two.objective >= one.objective * (1 - 2e-9)
        assert (classes.count * two.value).sum() >= (classes.count * one.value).sum() - 1e-9


# ---- capacity ------------------------------------------------------------------------


def test_scaling_every_type_up_never_lowers_the_objective() -> None:
    # Uniform scaling keeps every P_j, so the feasible set only grows.
    for seed in range(6):
        p = random_problem(30, {"v100": 2, "p100": 3, "k80": 4}, seed=seed)
        last = 0.0
        for factor in (1, 2, 3, 5):
            q = dataclasses.replace(p, cluster={t: c * factor for t, c in p.cluster.items()})
            obj = allocate(q, "max_min_fairness").objective
            assert obj >= last * (1 - 1e-9)
            last = obj


def test_more_gpus_with_the_normaliser_held_never_lowers_the_minimum() -> None:
    # With P_j fixed, adding GPUs of any type only enlarges the feasible set. (With P_j
    # recomputed from the new capacity, the normalised objective can drop: P_j is
    # a capacity-weighted mean, e.g. more v100s raise every job's P_j.)
    for seed in range(10):
        p = random_problem(25, {"v100": 2, "p100": 2, "k80": 3}, seed=seed)
        classes = group_jobs(p)
        coef = fairness_coefficients(classes, classes.throughput)
        base = solve_max_min_classes(coef, classes.allowed(), classes.scale, classes.count,
                                     classes.capacity).objective  # fmt: skip
        for k in range(3):
            cap = classes.capacity.copy()
            cap[k] += 1 + seed % 3
            allowed = (classes.throughput > 0) & (classes.scale[:, None] <= cap[None, :])
            more = solve_max_min_classes(coef * allowed, allowed, classes.scale,
                                         classes.count, cap).objective  # fmt: skip
            assert more >= base * (1 - 1e-9)


@pytest.mark.parametrize("packed", [False, True])
def test_interior_point_and_simplex_agree(packed: bool) -> None:
    # Large problems switch stage 1 to HiGHS's IPM (+ crossover); force both on small ones.
    from slurm_gavel.policies.solvers.mm_pairs import class_pair_vars

    for seed in range(6):
        p = random_problem(60, 5, seed=seed, with_pairs=packed, weights=(1.0, 2.0))
        classes = group_jobs(p, by_job_type=packed)
        coef = fairness_coefficients(classes, classes.throughput)
        pairs = class_pair_vars(p, classes) if packed else None
        args = (coef, classes.allowed(), classes.scale, classes.count, classes.capacity, pairs)
        ipm = solve_max_min_classes(*args, solver="ipm")
        simplex = solve_max_min_classes(*args, solver="simplex")
        assert ipm.objective == pytest.approx(simplex.objective, rel=1e-7)
        total = (classes.count * simplex.value).sum()
        assert (classes.count * ipm.value).sum() == pytest.approx(total, rel=1e-6)
