"""The joint max-min LP over (GPU type, count) (policies/solvers/mold_lp.py) against a
per-job cvxpy reference, and its count choice on hand-checked cases."""

from __future__ import annotations

import random

import cvxpy as cp
import numpy as np
import pytest

from slurm_gavel.policies.solvers.mold_lp import (
    CountAllocation,
    CountJob,
    allocate_counts,
    pick_counts,
)


def _reference(jobs: list[CountJob], capacity: dict[str, int]) -> tuple[float, float]:
    """Per job, per (type, count) column, no classes: (z*, total value at stage 2)."""
    cols = [
        (i, t, c, j.rates[c].get(t, 0.0) * j.request / (j.weight * j.norm))
        for i, j in enumerate(jobs)
        for c in j.rates
        for t in capacity
        if j.rates[c].get(t, 0.0) > 0 and c <= capacity[t]
    ]
    x = cp.Variable(len(cols), nonneg=True)
    value = [
        cp.sum([x[k] * v for k, (i, _t, _c, v) in enumerate(cols) if i == ii])
        for ii in range(len(jobs))
    ]
    cons = []
    for ii in range(len(jobs)):
        mine = [k for k, col in enumerate(cols) if col[0] == ii]
        if mine:
            cons.append(cp.sum(x[mine]) <= 1)
    for t, g in capacity.items():
        mine = [k for k, col in enumerate(cols) if col[1] == t]
        if mine:
            cons.append(
                cp.sum(cp.multiply(np.array([cols[k][2] for k in mine], float), x[mine])) <= g
            )
    runnable = sorted({col[0] for col in cols})
    z = cp.Variable()
    p1 = cp.Problem(cp.Maximize(z), cons + [value[i] >= z for i in runnable])
    p1.solve(solver="HIGHS")
    zs = float(z.value)
    p2 = cp.Problem(
        cp.Maximize(cp.sum([value[i] for i in runnable])),
        cons + [value[i] >= zs * (1 - 1e-9) for i in runnable],
    )
    p2.solve(solver="HIGHS")
    return zs, float(p2.value)


def _total(jobs: list[CountJob], alloc: CountAllocation) -> float:
    return sum(
        x * j.rates[c][t] * j.request / (j.weight * j.norm)
        for j in jobs
        for (t, c), x in alloc.x[j.id].items()
    )


def _random_jobs(rng: random.Random, n: int) -> list[CountJob]:
    kinds = []
    for _ in range(3):  # a few kinds, so that classes hold several jobs
        counts = rng.choice([(1,), (1, 2), (1, 2, 4), (2, 4, 8)])
        base = {t: rng.uniform(0.2, 2.0) for t in ("k80", "p100", "v100")}
        rates = {
            c: {
                t: (v * c ** rng.uniform(0.6, 1.3) if rng.random() > 0.1 else 0.0)
                for t, v in base.items()
            }
            for c in counts
        }
        kinds.append((rates, rng.choice(counts), rng.choice([1.0, 2.0])))
    jobs = []
    for i in range(n):
        rates, req, w = rng.choice(kinds)
        jobs.append(CountJob(i, rates, req, 1.0 + sum(rates[min(rates)].values()), w))
    return jobs


@pytest.mark.parametrize("seed", range(12))
def test_matches_the_per_job_reference(seed: int) -> None:
    rng = random.Random(seed)
    jobs = _random_jobs(rng, rng.randint(2, 9))
    capacity = {"k80": rng.randint(0, 8), "p100": rng.randint(1, 8), "v100": rng.randint(1, 8)}
    alloc = allocate_counts(jobs, capacity)
    z, total = _reference(jobs, capacity)
    assert alloc.objective == pytest.approx(z, rel=1e-6, abs=1e-9)
    assert _total(jobs, alloc) == pytest.approx(total, rel=1e-6, abs=1e-9)
    # feasible: each job's time <= 1, each type's GPUs <= its capacity
    for j in jobs:
        assert sum(alloc.x[j.id].values()) <= 1 + 1e-7
    for t, g in capacity.items():
        used = sum(c * x for j in jobs for (tt, c), x in alloc.x[j.id].items() if tt == t)
        assert used <= g + 1e-6


def _two_jobs(rate2: float) -> list[CountJob]:
    rates = {1: {"v100": 1.0}, 2: {"v100": rate2}}
    # request 2: P_j is its 2-GPU rate over the cluster (all v100 here)
    return [CountJob(i, rates, 2, rate2) for i in (1, 2)]


def test_sublinear_jobs_shrink_to_share_the_gpus() -> None:
    # 2 V100s, two 2-GPU jobs that run 1.5x faster on 2 GPUs than on 1: each at 1 GPU
    # all the time does 1.0 steps/s, time-sharing 2 GPUs only 0.75
    jobs = _two_jobs(1.5)
    alloc = allocate_counts(jobs, {"v100": 2})
    assert alloc.objective == pytest.approx(1.0 * 2 / 1.5)
    assert pick_counts(jobs, alloc) == {1: 1, 2: 1}


def test_superlinear_jobs_keep_the_larger_count() -> None:
    # 3x faster on 2 GPUs: half the time on 2 (1.5 steps/s) beats 1 GPU (1.0)
    jobs = _two_jobs(3.0)
    alloc = allocate_counts(jobs, {"v100": 2})
    assert alloc.objective == pytest.approx(0.5 * 3.0 * 2 / 3.0)
    assert pick_counts(jobs, alloc) == {1: 2, 2: 2}


def test_a_lone_job_grows_into_idle_gpus_of_the_type_it_runs_best_on() -> None:
    rates = {
        1: {"k80": 1.0, "v100": 2.0},
        2: {"k80": 1.6, "v100": 3.8},
        4: {"k80": 3.0, "v100": 7.0},
    }
    job = CountJob(7, rates, 1, 1.5)
    alloc = allocate_counts([job], {"k80": 4, "v100": 2})
    # 4 GPUs only fit on k80 (3.0); 2 V100s give 3.8
    assert alloc.x[7] == {("v100", 2): pytest.approx(1.0)}
    assert pick_counts([job], alloc) == {7: 2}


def test_pick_spreads_a_class_in_proportion_to_its_time_per_count() -> None:
    jobs = [CountJob(i, {1: {"v100": 1.0}, 2: {"v100": 2.0}}, 1, 1.0) for i in range(5)]
    share = {("v100", 1): 0.3, ("v100", 2): 0.45}  # 40 % / 60 % of the class's time
    alloc = CountAllocation({j.id: dict(share) for j in jobs}, 0.0)
    assert pick_counts(jobs, alloc) == {0: 1, 1: 1, 2: 2, 3: 2, 4: 2}


def test_a_job_given_no_time_starts_at_its_least_count() -> None:
    jobs = [CountJob(3, {2: {"v100": 1.0}, 4: {"v100": 2.5}}, 4, 2.5)]
    alloc = CountAllocation({3: {}}, 0.0)
    assert pick_counts(jobs, alloc) == {3: 2}


def test_no_runnable_job_gives_an_empty_allocation() -> None:
    jobs = [CountJob(1, {8: {"v100": 1.0}}, 8, 1.0)]  # 8 GPUs on a 4-GPU type
    alloc = allocate_counts(jobs, {"v100": 4})
    assert alloc.x == {1: {}} and alloc.objective == 0.0
