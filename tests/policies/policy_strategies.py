"""Hypothesis strategies shared by the policy property tests.

Small random problems whose jobs are drawn from a few templates (a throughput row and
a scale factor), so that classes of identical jobs appear: the class code paths of the
LP policies only run when jobs repeat. Each test module adds what its policy reads
(steps, SLOs, accounts, prices) on top. Imported as a plain module: pytest puts this
folder on sys.path (tests/ is not a package).
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from slurm_gavel.domain.model import Allocation, Problem, ProblemJob
from slurm_gavel.errors import InputError
from slurm_gavel.policies import PolicyOptions, allocate

SPEEDS = (0.0, 0.5, 1.0, 2.0, 3.5)


@st.composite
def clusters(
    draw: st.DrawFn, *, types: Sequence[str] = ("v", "p", "k"), min_gpus: int = 0, max_gpus: int = 6
) -> dict[str, int]:
    """One to three GPU types; the first always has a GPU, so some job can run."""
    chosen = list(types)[: draw(st.integers(1, len(types)))]
    cluster = {t: draw(st.integers(min_gpus, max_gpus)) for t in chosen}
    cluster[chosen[0]] = max(cluster[chosen[0]], 1)
    return cluster


@st.composite
def templated_jobs(
    draw: st.DrawFn,
    types: Sequence[str],
    *,
    speeds: Sequence[float] = SPEEDS,
    scales: Sequence[int] = (1, 1, 2, 4),
    max_jobs: int = 7,
    min_first_speed: float = 0.0,
) -> list[tuple[dict[str, float], int]]:
    """(throughput row, scale factor) per job, from one to three templates.

    min_first_speed > 0 makes every template runnable on the first type."""
    templates = []
    for _ in range(draw(st.integers(1, 3))):
        row = {t: draw(st.sampled_from(speeds)) for t in types}
        row[types[0]] = max(row[types[0]], min_first_speed)
        templates.append((row, draw(st.sampled_from(scales))))
    picks = draw(st.lists(st.integers(0, len(templates) - 1), min_size=1, max_size=max_jobs))
    return [templates[k] for k in picks]


@st.composite
def problems_with_steps(
    draw: st.DrawFn,
    steps: Sequence[float],
    since: Sequence[float] | None = None,
    max_jobs: int = 7,
) -> Problem:
    """Templated jobs with steps remaining drawn from ``steps`` (and seconds since
    their start from ``since``, else 0): what the policies that plan with the steps
    left read."""
    cluster = draw(clusters())
    jobs = []
    for i, (row, sf) in enumerate(draw(templated_jobs(list(cluster), max_jobs=max_jobs))):
        left = draw(st.sampled_from(steps))
        started = 0.0 if since is None else draw(st.sampled_from(since))
        jobs.append(ProblemJob(str(i), "t", row, sf, 1.0, left, started))
    return Problem(cluster, tuple(jobs))


def assert_needs_steps_remaining(policy: str) -> None:
    """A policy that plans with the steps left refuses a job without them."""
    p = Problem({"v": 1}, (ProblemJob("a", "t", {"v": 1.0}),))
    with pytest.raises(InputError, match=f"job a: {policy} needs steps_remaining"):
        allocate(p, policy)


def against_reference(
    p: Problem, policy: str, rel: float, abs: float = 0.0
) -> tuple[Allocation, Allocation]:
    """The policy's allocation and the reference solver's (``reference=True``: the
    plain formulation, no class aggregation or decomposition), their objectives
    checked equal within ``rel`` / ``abs``."""
    fast = allocate(p, policy)
    ref = allocate(p, policy, PolicyOptions(reference=True))
    assert fast.objective == pytest.approx(ref.objective, rel=rel, abs=abs)
    return fast, ref


def against_solvers(max_examples: int) -> settings:
    """Settings of property tests that compare with a numerical solver: the same
    examples in every CI run (derandomize), no deadline (a solve may take a while)."""
    return settings(
        max_examples=max_examples,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow],
        derandomize=True,
    )
