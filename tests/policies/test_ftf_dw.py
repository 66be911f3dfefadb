"""The stretch LP by decomposition (ftf_dw.py) against HiGHS's class LP: finish_time_fairness
and min_total_duration on small problems with no two jobs alike give the same optimum
(to 1e-8 relative) and feasible allocations; the decomposition is really what ran."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from slurm_gavel.domain.model import Problem
from slurm_gavel.policies import PolicyOptions, allocate
from slurm_gavel.policies.solvers import dw, ftf_dw
from slurm_gavel.simulate.synthetic import random_problem


def distinct(n: int, gpus: int, seed: int, spread: float = 0.2) -> Problem:
    """random_problem with every throughput scaled by its own factor: no classes."""
    p = random_problem(n, gpus, seed=seed)
    rng = np.random.default_rng(seed + 100)
    jobs = tuple(
        dataclasses.replace(
            j,
            throughput={t: v * float(rng.uniform(1 - spread, 1 + spread))
                        for t, v in j.throughput.items()},
            time_since_start=float(rng.uniform(0, 3600)),
        )
        for j in p.jobs
    )  # fmt: skip
    return dataclasses.replace(p, jobs=jobs)


def _solve(monkeypatch: pytest.MonkeyPatch, p: Problem, policy: str, decompose: bool):
    calls = []
    real = ftf_dw.DwStretch.solve

    def counted(self, w, dw):  # type: ignore[no-untyped-def]
        calls.append(1)
        return real(self, w, dw)

    monkeypatch.setattr(ftf_dw, "DW_MIN_JOBS", 1 if decompose else 10**9)
    monkeypatch.setattr(ftf_dw.DwStretch, "solve", counted)
    alloc = allocate(p, policy, PolicyOptions())
    assert bool(calls) == decompose
    return alloc


def _feasible(p: Problem, alloc) -> None:  # type: ignore[no-untyped-def]
    assert alloc.violations(p) == []


@pytest.mark.parametrize("policy", ["finish_time_fairness", "min_total_duration"])
@pytest.mark.parametrize(
    "seed,n,gpus", [(0, 60, 8), (1, 120, 16), (2, 40, 40), (3, 200, 10), (4, 50, 4)]
)
def test_decomposition_matches_class_lp(
    monkeypatch: pytest.MonkeyPatch, policy: str, seed: int, n: int, gpus: int
) -> None:
    p = distinct(n, gpus, seed)
    ref = _solve(monkeypatch, p, policy, decompose=False)
    got = _solve(monkeypatch, p, policy, decompose=True)
    assert got.objective == pytest.approx(ref.objective, rel=1e-8)
    _feasible(p, got)


def test_threshold_needs_distinct_jobs() -> None:
    assert ftf_dw.use_decomposition(10_000, 10_000, 3)
    assert not ftf_dw.use_decomposition(10_000, 100, 3)  # classes: the class LP is small
    assert not ftf_dw.use_decomposition(100, 100, 3)  # small: HiGHS (simulator bit for bit)
    assert not ftf_dw.use_decomposition(10_000, 10_000, dw.DW_MAX_TYPES + 1)
