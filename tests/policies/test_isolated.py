"""isolated: Gavel's equal share, feasible and scaled only when a row would exceed 1."""

from __future__ import annotations

import pytest

from slurm_gavel.policies import allocate
from slurm_gavel.simulate.synthetic import random_problem


def test_equal_share_of_each_type(make_problem) -> None:
    # 4 jobs, 8 v + 4 k: each gets 2 v-GPUs and 1 k-GPU of time: x = (2, 1)/s, row 3 > 1,
    # scaled to (2/3, 1/3) for the 1-GPU jobs; the 2-GPU job gets (1, 0.5)/1.5.
    p = make_problem(
        {"v": 8, "k": 4},
        [("A", {"v": 1, "k": 1}, 1, 1)] * 3 + [("B", {"v": 1, "k": 1}, 2, 1)],
    )
    alloc = allocate(p, "isolated")
    assert alloc.fractions["0"] == pytest.approx({"v": 2 / 3, "k": 1 / 3})
    assert alloc.fractions["3"] == pytest.approx({"v": 2 / 3, "k": 1 / 3})
    assert alloc.violations(p) == []


def test_oversubscribed_cluster_splits_exactly(make_problem) -> None:
    # 5 jobs on 2 GPUs: x = 2/5 each, capacity exactly used (no row scaling).
    p = make_problem({"v": 2}, [("A", {"v": 1}, 1, 1)] * 5)
    alloc = allocate(p, "isolated")
    assert all(alloc.fractions[j.id]["v"] == pytest.approx(0.4) for j in p.jobs)
    assert alloc.gpus_used(p)["v"] == pytest.approx(2.0)


def test_no_time_where_a_job_cannot_run(make_problem) -> None:
    p = make_problem({"v": 2, "k": 2}, [("A", {"v": 1}, 1, 1), ("B", {"v": 1, "k": 1}, 1, 1)])
    alloc = allocate(p, "isolated")
    assert alloc.fractions["0"]["k"] == 0.0
    assert alloc.fractions["1"] == pytest.approx({"v": 0.5, "k": 0.5})


def test_feasible_on_random_problems() -> None:
    for seed in range(10):
        p = random_problem(7 + 13 * seed, {"v100": seed % 4, "p100": 3, "k80": 9}, seed=seed)
        assert allocate(p, "isolated").violations(p) == []
