"""Fixtures for the policy tests: tiny hand-made problems and an independent objective.

The helpers are handed out as fixtures (tests/ is not a package, so test modules
cannot import from here).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import pytest

from slurm_gavel.domain.model import Allocation, PairThroughput, Problem, ProblemJob


def _make_problem(
    cluster: Mapping[str, int],
    jobs: Iterable[tuple[str, Mapping[str, float], int, float] | tuple],
    pairs: Iterable[tuple[str, str, int, Mapping[str, tuple[float, float]]]] = (),
) -> Problem:
    """jobs: (job_type, throughput, scale_factor, weight); ids are "0", "1", ..."""
    built = []
    for i, (job_type, tput, sf, w) in enumerate(jobs):
        row = {t: float(tput.get(t, 0.0)) for t in cluster}
        built.append(ProblemJob(str(i), job_type, row, int(sf), float(w)))
    pair_entries = tuple(PairThroughput(a, b, sf, dict(t)) for a, b, sf, t in pairs)
    return Problem(dict(cluster), tuple(built), pair_entries)


def _normalised_values(
    problem: Problem, alloc: Allocation, *, agnostic: bool = False
) -> dict[str, float]:
    """s_j * rate_j / (w_j * P_j) per job, recomputed from the allocation alone.

    rate_j comes from Allocation.effective_throughput (single and paired time), P_j
    from the formula of docs/design.md §2.2; agnostic counts 1 step/s on every type a job runs on
    (and then rate_j is the agnostic rate: time on types, not steps).
    """
    cap_total = sum(problem.cluster.values())
    out = {}
    for j in problem.jobs:
        tput = {t: (1.0 if v > 0 else 0.0) if agnostic else v for t, v in j.throughput.items()}
        p = sum(tput[t] * problem.cluster[t] for t in problem.cluster) / cap_total
        if agnostic:
            rate = sum(tput[t] * x for t, x in alloc.fractions.get(j.id, {}).items())
        else:
            rate = alloc.effective_throughput(problem, j.id)
        out[j.id] = j.scale_factor * rate / (j.priority_weight * p) if p > 0 else float("inf")
    return out


def _assert_work_conserving(p: Problem, alloc: Allocation) -> None:
    """No type has idle GPUs while a job with steps left that runs there has time left
    (finish-time fairness and makespan hand spare GPUs out)."""
    used = alloc.gpus_used(p)
    for t, cap in p.cluster.items():
        if cap - used[t] <= 1e-6:
            continue
        for j in p.jobs:
            if j.throughput.get(t, 0.0) > 0 and j.scale_factor <= cap and j.steps_remaining:
                assert alloc.job_total(j.id) >= 1 - 1e-6, (t, j.id)


def _runnable_min(problem: Problem, values: Mapping[str, float]) -> float:
    """Min over jobs that fit on some type where they run (the max-min objective)."""
    ok = [
        values[j.id]
        for j in problem.jobs
        if any(v > 0 and j.scale_factor <= problem.cluster[t] for t, v in j.throughput.items())
    ]
    return min(ok) if ok else 0.0


@pytest.fixture
def make_problem():
    return _make_problem


@pytest.fixture
def normalised_values():
    return _normalised_values


@pytest.fixture
def runnable_min():
    return _runnable_min


@pytest.fixture(scope="session")  # session: usable inside hypothesis @given tests
def assert_work_conserving():
    return _assert_work_conserving
