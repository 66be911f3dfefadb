"""max_min_fairness_packed: analytical optima, exact disaggregation, fast path == reference."""

from __future__ import annotations

import numpy as np
import pytest

from slurm_gavel.domain.model import Problem
from slurm_gavel.policies import PolicyOptions, allocate
from slurm_gavel.policies.solvers.classes import group_jobs
from slurm_gavel.policies.solvers.mm_disaggregate import cyclic_pairs, northwest_corner
from slurm_gavel.simulate.synthetic import random_problem

NAME = "max_min_fairness_packed"
REF = PolicyOptions(reference=True)


def both(problem: Problem):
    return allocate(problem, NAME), allocate(problem, NAME, REF)


# ---- analytical optima (one type, 1 step/s alone, so value = rate / P = rate) ----------


@pytest.mark.parametrize(("rate", "expected"), [(0.8, 0.8), (0.3, 0.5), (0.5, 0.5)])
def test_two_jobs_one_gpu_pair_only_when_it_helps(make_problem, rate, expected) -> None:
    # Alone: x_A + x_B <= 1 gives 1/2 each. Paired all the time: `rate` each.
    # Mixed: x + rate*y with 2x + y <= 1 is linear in y, so the better end wins.
    p = make_problem(
        {"v": 1},
        [("A", {"v": 1}, 1, 1), ("B", {"v": 1}, 1, 1)],
        pairs=[("A", "B", 1, {"v": (rate, rate)})],
    )
    for alloc in both(p):
        assert alloc.objective == pytest.approx(expected, rel=1e-7)
        assert alloc.violations(p) == []


def test_three_jobs_of_one_class_pair_cyclically(make_problem, normalised_values) -> None:
    # Within-class pair time Y: each job gets 2Y/3 of it at 0.6 and x alone with
    # 3x + Y <= 1: value (1 - Y)/3 + 0.4 Y, best at Y = 1: 0.4 (vs 1/3 unpacked).
    p = make_problem(
        {"v": 1}, [("A", {"v": 1}, 1, 1)] * 3, pairs=[("A", "A", 1, {"v": (0.6, 0.6)})]
    )
    fast, ref = both(p)
    for alloc in (fast, ref):
        assert alloc.objective == pytest.approx(0.4, rel=1e-7)
        assert alloc.violations(p) == []
        values = normalised_values(p, alloc)
        assert min(values.values()) == pytest.approx(0.4, rel=1e-6)
    assert len(fast.pairs) == 3  # (0,1), (1,2), (2,0): every job in exactly two pairs
    assert {frozenset(s.jobs) for s in fast.pairs} == {
        frozenset(("0", "1")),
        frozenset(("1", "2")),
        frozenset(("0", "2")),
    }


def test_two_jobs_of_one_class_share_one_pair(make_problem) -> None:
    p = make_problem(
        {"v": 1}, [("A", {"v": 1}, 1, 1)] * 2, pairs=[("A", "A", 1, {"v": (0.6, 0.6)})]
    )
    fast, ref = both(p)
    assert fast.objective == pytest.approx(0.6, rel=1e-7)
    assert ref.objective == pytest.approx(0.6, rel=1e-7)
    assert len(fast.pairs) == 1 and fast.pairs[0].fractions["v"] == pytest.approx(1.0)


def test_multi_gpu_jobs_pair(make_problem) -> None:
    # Two 4-GPU jobs on 4 GPUs: alone 1/2 each (value s x / P = 4 * 0.5 / 0.5 = 4);
    # paired they run at 0.8 of their rate all the time: value 4 * 0.8 / 0.5 = 6.4.
    # (P = 1 step/s * 4 GPUs / 8 GPUs in all.)
    p = make_problem(
        {"v": 4, "k": 4},
        [("A", {"v": 1}, 4, 1), ("B", {"v": 1}, 4, 1)],
        pairs=[("A", "B", 4, {"v": (0.8, 0.8)})],
    )
    for alloc in both(p):
        assert alloc.objective == pytest.approx(6.4, rel=1e-7)
        assert alloc.gpus_used(p)["v"] == pytest.approx(4.0)


def test_pairs_never_use_a_type_a_job_cannot_run_on(make_problem) -> None:
    # The pair entry offers k, but B cannot run on k alone: no pair time on k.
    p = make_problem(
        {"v": 1, "k": 1},
        [("A", {"v": 1, "k": 1}, 1, 1), ("B", {"v": 1}, 1, 1)],
        pairs=[("A", "B", 1, {"v": (0.9, 0.9), "k": (0.9, 0.9)})],
    )
    for alloc in both(p):
        assert all(s.fractions.get("k", 0.0) == 0.0 for s in alloc.pairs)
        assert alloc.fractions["1"]["k"] == 0.0


# ---- disaggregation -----------------------------------------------------------------


@pytest.mark.parametrize(("n_rows", "n_cols"), [(1, 1), (1, 5), (5, 1), (3, 7), (12, 8), (9, 9)])
def test_northwest_corner_has_exact_marginals_and_few_entries(n_rows, n_cols) -> None:
    out = northwest_corner(n_rows, n_cols)
    assert len(out) <= n_rows + n_cols - 1
    rows, cols = np.zeros(n_rows), np.zeros(n_cols)
    for i, j, share in out:
        assert share > 0
        rows[i] += share
        cols[j] += share
    np.testing.assert_allclose(rows, 1 / n_rows, rtol=1e-12)
    np.testing.assert_allclose(cols, 1 / n_cols, rtol=1e-12)


@pytest.mark.parametrize("n", [2, 3, 4, 11])
def test_cyclic_pairs_give_each_job_two_over_n(n) -> None:
    time = np.zeros(n)
    for i, j, share in cyclic_pairs(n):
        assert i != j
        time[i] += share
        time[j] += share
    np.testing.assert_allclose(time, 2 / n, rtol=1e-12)
    assert cyclic_pairs(1) == []


def test_output_size_is_bounded_by_class_sizes() -> None:
    p = random_problem(300, 24, seed=5, with_pairs=True)
    alloc = allocate(p, NAME)
    classes = group_jobs(p, by_job_type=True)
    cls = {p.jobs[i].id: int(classes.job_class[i]) for i in range(len(p.jobs))}
    count = classes.count
    used: set[tuple[int, int]] = set()
    for share in alloc.pairs:
        used.add(tuple(sorted((cls[share.jobs[0]], cls[share.jobs[1]]))))  # type: ignore[arg-type]
    bound = sum(count[c] if c == d else count[c] + count[d] - 1 for c, d in used)
    assert len(alloc.pairs) <= bound


# ---- fast path == reference ----------------------------------------------------------


@pytest.mark.parametrize("seed", range(15))
def test_fast_path_matches_reference(seed, normalised_values, runnable_min) -> None:
    rng = np.random.default_rng(200 + seed)
    gpus = {
        "v100": int(rng.integers(1, 9)),
        "p100": int(rng.integers(0, 9)),
        "k80": int(rng.integers(1, 9)),
    }
    p = random_problem(
        int(rng.integers(2, 28)),
        gpus,
        seed=seed,
        multi_gpu=seed % 4 != 0,
        with_pairs=True,
        weights=(1.0, 1.0, 2.0),
    )
    fast, ref = both(p)
    assert fast.objective == pytest.approx(ref.objective, rel=1e-6)
    assert fast.violations(p) == [] and ref.violations(p) == []
    # The concrete job pairs deliver what the class LP promised, job by job.
    values = normalised_values(p, fast)
    assert runnable_min(p, values) == pytest.approx(fast.objective, rel=1e-6)
    total_ref = sum(normalised_values(p, ref).values())
    assert sum(values.values()) == pytest.approx(total_ref, rel=1e-5)


def test_packing_never_lowers_the_objective() -> None:
    for seed in range(10):
        p = random_problem(40, {"v100": 3, "p100": 4, "k80": 5}, seed=seed, with_pairs=True)
        packed = allocate(p, NAME).objective
        plain = allocate(p, "max_min_fairness").objective
        assert packed >= plain * (1 - 1e-7)


def test_without_pair_entries_packed_equals_plain() -> None:
    for seed in range(4):
        p = random_problem(30, 4, seed=seed)
        alloc = allocate(p, NAME)
        assert alloc.pairs == []
        assert alloc.objective == pytest.approx(allocate(p, "max_min_fairness").objective, rel=1e-7)


def test_fast_path_matches_reference_at_100_jobs() -> None:
    p = random_problem(100, 25, seed=7, with_pairs=True)
    fast, ref = both(p)
    assert fast.objective == pytest.approx(ref.objective, rel=1e-6)


@pytest.mark.parametrize("weights", [(1.0,), (1.0, 2.0, 4.0)])
def test_pricing_pair_columns_in_reaches_the_full_lp_optimum(weights) -> None:
    # Many pair columns enter the LP by pricing (column generation); it must land on
    # the optimum of the LP that has them all, in both stages.
    from slurm_gavel.policies.solvers.classes import fairness_coefficients
    from slurm_gavel.policies.solvers.mm_lp import solve_max_min_classes
    from slurm_gavel.policies.solvers.mm_pairs import class_pair_vars

    for seed in range(4):
        p = random_problem(150, 12, seed=seed, with_pairs=True, weights=weights)
        classes = group_jobs(p, by_job_type=True)
        coef = fairness_coefficients(classes, classes.throughput)
        pairs = class_pair_vars(p, classes)
        args = (coef, classes.allowed(), classes.scale, classes.count, classes.capacity, pairs)
        priced = solve_max_min_classes(*args, priced=True)
        full = solve_max_min_classes(*args, priced=False)
        assert priced.objective == pytest.approx(full.objective, rel=1e-7)
        total = (classes.count * full.value).sum()
        assert (classes.count * priced.value).sum() == pytest.approx(total, rel=1e-6)
