"""Property tests (hypothesis) over small random problems, for every policy in this family.

Every allocation is feasible (Allocation.violations: rows <= 1 with pairs, capacity
with a pair counted once), gives no time on a type where the job cannot run, pairs
only jobs that may share; the LP policies' fast path reaches the reference optimum.
Problems draw jobs from a few templates so that classes of identical jobs appear.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from slurm_gavel.domain.model import PairThroughput, Problem, ProblemJob, pair_lookup
from slurm_gavel.policies import PolicyOptions, allocate

POLICIES = [
    "max_min_fairness",
    "max_min_fairness_agnostic",
    "max_min_fairness_packed",
    "max_sum_throughput",
    "isolated",
    "gandiva",
]
LP_POLICIES = POLICIES[:4]
TYPES = ["v", "p", "k"]
JOB_TYPES = ["A", "B", "C"]


@st.composite
def problems(draw: st.DrawFn) -> Problem:
    types = TYPES[: draw(st.integers(1, 3))]
    cluster = {t: draw(st.integers(0, 5)) for t in types}
    if not any(cluster.values()):
        cluster[types[0]] = 1
    speed = st.sampled_from([0.0, 0.5, 1.0, 2.0, 3.0])
    n_templates = draw(st.integers(1, 3))
    templates = []
    for _ in range(n_templates):
        row = {t: draw(speed) for t in types}
        if not any(row.values()):
            row[types[0]] = 1.0
        templates.append(
            (
                draw(st.sampled_from(JOB_TYPES)),
                row,
                draw(st.sampled_from([1, 1, 2, 4])),
                draw(st.sampled_from([1.0, 2.0])),
            )
        )
    picks = draw(st.lists(st.integers(0, n_templates - 1), min_size=1, max_size=7))
    jobs = tuple(
        ProblemJob(str(i), templates[k][0], templates[k][1], templates[k][2], templates[k][3])
        for i, k in enumerate(picks)
    )
    pair_rate = st.sampled_from([0.0, 0.3, 0.6, 0.9])
    pairs = []
    for i, a in enumerate(JOB_TYPES):
        for b in JOB_TYPES[i:]:
            for sf in (1, 2, 4):
                if draw(st.booleans()):
                    rates = {t: (draw(pair_rate), draw(pair_rate)) for t in types}
                    pairs.append(PairThroughput(a, b, sf, rates))
    return Problem(cluster, jobs, tuple(pairs))


def can_run(problem: Problem, job: ProblemJob, t: str) -> bool:
    return job.throughput.get(t, 0.0) > 0 and job.scale_factor <= problem.cluster[t]


SETTINGS = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.mark.parametrize("name", POLICIES)
@SETTINGS
@given(problem=problems(), seed=st.integers(0, 3))
def test_allocation_is_feasible(name: str, problem: Problem, seed: int) -> None:
    alloc = allocate(problem, name, PolicyOptions(seed=seed))
    assert alloc.violations(problem) == []
    for job in problem.jobs:
        for t, x in alloc.fractions.get(job.id, {}).items():
            assert x >= 0
            if not can_run(problem, job, t):
                assert x == 0, f"job {job.id} has time on {t} where it cannot run"
    table = pair_lookup(problem)
    for share in alloc.pairs:
        a, b = (problem.job(j) for j in share.jobs)
        assert a.id != b.id
        assert a.scale_factor == b.scale_factor
        entry = table.get((a.job_type, b.job_type, a.scale_factor))
        assert entry is not None
        for t, y in share.fractions.items():
            assert y >= 0
            if y > 0:
                assert t in entry and can_run(problem, a, t) and can_run(problem, b, t)


@pytest.mark.parametrize("name", LP_POLICIES)
@SETTINGS
@given(problem=problems())
def test_fast_path_reaches_the_reference_optimum(name: str, problem: Problem) -> None:
    fast = allocate(problem, name)
    ref = allocate(problem, name, PolicyOptions(reference=True))
    assert fast.objective == pytest.approx(ref.objective, rel=1e-6, abs=1e-9)


@pytest.mark.parametrize("reference", [False, True])
@pytest.mark.parametrize("name", POLICIES)
def test_no_jobs_gives_an_empty_allocation(name: str, reference: bool) -> None:
    alloc = allocate(Problem({"v": 2}, ()), name, PolicyOptions(reference=reference))
    assert alloc.fractions == {} and alloc.pairs == []
    assert alloc.objective in (None, 0.0)
