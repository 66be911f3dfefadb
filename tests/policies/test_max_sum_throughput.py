"""max_sum_throughput: analytical optimum, fast path == reference, objective is real steps/s."""

from __future__ import annotations

import numpy as np
import pytest

from slurm_gavel.policies import PolicyOptions, allocate
from slurm_gavel.simulate.synthetic import random_problem

NAME = "max_sum_throughput"


def test_fast_job_gets_the_fast_gpu(make_problem) -> None:
    # A: 10 on v, 1 on k; B: 2 on v, 1 on k; one GPU of each. Best: A on v, B on k = 11.
    p = make_problem(
        {"v": 1, "k": 1}, [("A", {"v": 10, "k": 1}, 1, 1), ("B", {"v": 2, "k": 1}, 1, 1)]
    )
    for alloc in (allocate(p, NAME), allocate(p, NAME, PolicyOptions(reference=True))):
        assert alloc.objective == pytest.approx(11.0, rel=1e-9)
        assert alloc.fractions["0"]["v"] == pytest.approx(1.0)
        assert alloc.fractions["1"]["k"] == pytest.approx(1.0)


def test_scale_factor_only_in_capacity(make_problem) -> None:
    # Gavel's ThroughputSumWithPerf does not weigh by scale factor: a 2-GPU job at 3
    # steps/s loses to two 1-GPU jobs at 2 each on 2 GPUs (4 > 3).
    p = make_problem(
        {"v": 2}, [("A", {"v": 3}, 2, 1), ("B", {"v": 2}, 1, 1), ("C", {"v": 2}, 1, 1)]
    )
    alloc = allocate(p, NAME)
    assert alloc.objective == pytest.approx(4.0, rel=1e-9)
    assert alloc.fractions["0"]["v"] == pytest.approx(0.0, abs=1e-9)


@pytest.mark.parametrize("seed", range(10))
def test_fast_path_matches_reference(seed: int) -> None:
    rng = np.random.default_rng(300 + seed)
    gpus = {"v100": int(rng.integers(1, 9)), "p100": int(rng.integers(0, 9)),
            "k80": int(rng.integers(1, 9))}  # fmt: skip
    p = random_problem(int(rng.integers(1, 60)), gpus, seed=seed, weights=(1.0, 3.0))
    fast = allocate(p, NAME)
    ref = allocate(p, NAME, PolicyOptions(reference=True))
    assert fast.objective == pytest.approx(ref.objective, rel=1e-6)
    assert fast.violations(p) == [] and ref.violations(p) == []
    real = sum(fast.effective_throughput(p, j.id) for j in p.jobs)
    assert real == pytest.approx(fast.objective, rel=1e-9)


def test_at_least_as_much_throughput_as_max_min() -> None:
    for seed in range(5):
        p = random_problem(50, 5, seed=seed)
        total = allocate(p, NAME).objective
        fair = allocate(p, "max_min_fairness")
        assert total >= sum(fair.effective_throughput(p, j.id) for j in p.jobs) * (1 - 1e-9)
