"""mm_lp_single's direct HiGHS path returns the general path's vertex bit for bit."""

from __future__ import annotations

import numpy as np

from slurm_gavel.policies.solvers.classes import fairness_coefficients, group_jobs
from slurm_gavel.policies.solvers.mm_lp import solve_max_min_classes
from slurm_gavel.policies.solvers.mm_policy import agnostic_throughput
from slurm_gavel.simulate.synthetic import random_problem


def _same(a, b) -> None:
    assert np.array_equal(a.x, b.x)
    assert np.array_equal(a.y, b.y)
    assert np.array_equal(a.value, b.value)
    assert np.array_equal(a.runnable, b.runnable)
    assert a.objective == b.objective


def test_direct_path_equals_general_path_on_random_class_lps() -> None:
    rng = np.random.default_rng(0)
    for seed in range(40):
        n = int(rng.integers(1, 80))
        cluster = {t: int(rng.integers(0, 6)) for t in ("v100", "p100", "k80")}
        if not any(cluster.values()):
            cluster["k80"] = 1
        p = random_problem(n, cluster, seed=seed, weights=(1.0, 2.0, 0.5))
        classes = group_jobs(p)
        tput = classes.throughput if seed % 3 else agnostic_throughput(classes.throughput)
        coef = fairness_coefficients(classes, tput)
        args = (coef, classes.allowed(), classes.scale, classes.count, classes.capacity)
        for second in (True, False):
            fast = solve_max_min_classes(*args, second_stage=second)
            slow = solve_max_min_classes(*args, second_stage=second, direct=False)
            _same(fast, slow)


def test_reused_instance_gives_the_answer_of_a_fresh_one() -> None:
    # The direct path keeps one HiGHS instance per thread: solving B after A must
    # equal solving B first (no basis or option carried over).
    probs = []
    for seed in range(6):
        p = random_problem(30, {"v100": 3, "p100": 2, "k80": 4}, seed=seed)
        classes = group_jobs(p)
        coef = fairness_coefficients(classes, classes.throughput)
        probs.append((coef, classes.allowed(), classes.scale, classes.count, classes.capacity))
    first = [solve_max_min_classes(*a) for a in probs]
    again = [solve_max_min_classes(*a) for a in reversed(probs)][::-1]
    for a, b in zip(first, again, strict=True):
        _same(a, b)
