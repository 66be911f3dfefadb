"""mm_pack_groups: the partner-group packed LP has the class-pair LP's optimum, and its
concrete job pairs give every job exactly the value the LP says."""

from __future__ import annotations

import numpy as np
import pytest
from distinct_rows import jitter_rows

from slurm_gavel.domain.model import Problem
from slurm_gavel.policies import PolicyOptions, allocate
from slurm_gavel.policies.solvers import mm_pack_groups, mm_pricing
from slurm_gavel.policies.solvers.mm_pack_groups import _circle_pairs
from slurm_gavel.simulate.synthetic import random_problem

NAME = "max_min_fairness_packed"


def jittered(n_jobs: int, gpus: int, seed: int) -> Problem:
    """Distinct jobs (each throughput times its own factor in [0.8, 1.2]): one class each."""
    p = random_problem(n_jobs, gpus, seed=seed, with_pairs=True)
    return jitter_rows(p, seed + 1)


def _assert_same_optimum(p, fast, exact, normalised_values, runnable_min) -> None:  # type: ignore[no-untyped-def]
    """The group LP's allocation is feasible and has the class-pair LP's optimum."""
    assert fast.violations(p) == []
    assert fast.objective == pytest.approx(exact.objective, rel=1e-7)
    # the concrete job pairs give each job what the LP promised (no self-pairs dropped)
    values = normalised_values(p, fast)
    assert runnable_min(p, values) == pytest.approx(fast.objective, rel=1e-7)
    # stage 2: the same total normalised throughput
    ref_values = normalised_values(p, exact)
    assert sum(values.values()) == pytest.approx(sum(ref_values.values()), rel=1e-7)


# (jobs, GPUs per type, seed): the last four need max-degree rows (checked below)
CASES = [(12, 2, 0), (20, 4, 0), (12, 2, 4), (20, 4, 1), (30, 4, 4), (40, 8, 1)]


@pytest.mark.parametrize(("n", "gpus", "seed"), CASES)
def test_group_lp_matches_class_pair_lp(
    monkeypatch, normalised_values, runnable_min, n, gpus, seed
) -> None:
    p = jittered(n, gpus, seed)
    monkeypatch.setattr(mm_pack_groups, "GROUP_MIN_CLASSES", 10**9)
    exact = allocate(p, NAME)
    assert exact.solve_seconds >= 0
    rows: list[int] = []
    real_add_row = mm_pricing.PricedLp.add_row

    def spy(self, *args):  # count max-degree rows
        rows.append(1)
        return real_add_row(self, *args)

    monkeypatch.setattr(mm_pricing.PricedLp, "add_row", spy)
    monkeypatch.setattr(mm_pack_groups, "GROUP_MIN_CLASSES", 0)
    fast = allocate(p, NAME, PolicyOptions())
    _assert_same_optimum(p, fast, exact, normalised_values, runnable_min)
    assert all(a != b for pair in fast.pairs for a, b in [pair.jobs])
    if (n, gpus, seed) in CASES[2:]:
        assert rows, "this case should need a max-degree row"


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_classes_of_several_jobs(monkeypatch, normalised_values, runnable_min, seed) -> None:
    # No jitter: classes of several jobs (n_c > 1 in the consistency and degree rows)
    p = random_problem(30, 3, seed=seed, with_pairs=True, weights=(1.0, 2.0))
    monkeypatch.setattr(mm_pack_groups, "GROUP_MIN_CLASSES", 10**9)
    exact = allocate(p, NAME)
    monkeypatch.setattr(mm_pack_groups, "GROUP_MIN_CLASSES", 0)
    fast = allocate(p, NAME)
    _assert_same_optimum(p, fast, exact, normalised_values, runnable_min)


def test_threshold_keeps_small_problems_on_the_class_pair_lp(monkeypatch) -> None:
    p = jittered(20, 4, 1)
    called: list[int] = []
    monkeypatch.setattr(
        mm_pack_groups, "solve_packed_groups", lambda *a, **k: called.append(1) or None
    )
    allocate(p, NAME)
    assert called == []  # 20 classes < GROUP_MIN_CLASSES


@pytest.mark.parametrize(
    "degree", [[0.5, 0.3, 0.2], [1.0, 1.0], [0.1, 0.4, 0.2, 0.3, 0.0, 0.6], [0.25] * 5]
)
def test_circle_pairs_realise_degrees_without_self_pairs(degree) -> None:
    got = np.zeros(len(degree))
    for i, j, v in _circle_pairs(degree):
        assert i != j and v > 0
        got[i] += v
        got[j] += v
    assert got == pytest.approx(degree, abs=1e-12)


def _spy_runs(monkeypatch, after_init=None) -> list[list[str]]:
    """The HiGHS methods (PricedLp.runs) of every PricedLp built during the call."""
    seen: list[list[str]] = []
    real_init = mm_pricing.PricedLp.__init__

    def init(self, *args, **kwargs):
        real_init(self, *args, **kwargs)
        seen.append(self.runs)
        if after_init is not None:
            after_init(self)

    monkeypatch.setattr(mm_pricing.PricedLp, "__init__", init)
    return seen


@pytest.mark.parametrize(("n", "gpus", "seed"), CASES[2:])
def test_group_lp_ipm_then_primal_resolves_keep_the_optimum(
    monkeypatch, normalised_values, n, gpus, seed
) -> None:
    # The fast path's HiGHS methods: interior point first, primal simplex after new
    # columns or stage 2's cost, dual simplex after max-degree rows; same optimum as
    # the class-pair LP solved by the dual simplex alone.
    p = jittered(n, gpus, seed)
    monkeypatch.setattr(mm_pack_groups, "GROUP_MIN_CLASSES", 10**9)
    exact = allocate(p, NAME)
    monkeypatch.setattr(mm_pack_groups, "GROUP_MIN_CLASSES", 0)
    monkeypatch.setattr(mm_pack_groups, "HINT", False)  # one LP to watch
    seen = _spy_runs(monkeypatch)
    fast = allocate(p, NAME)
    (runs,) = seen
    assert runs[0] == "ipm"
    assert "primal" in runs and "dual" in runs  # columns priced in, degree rows added
    assert fast.violations(p) == []
    assert fast.objective == pytest.approx(exact.objective, rel=1e-7)
    values, ref = normalised_values(p, fast), normalised_values(p, exact)
    assert sum(values.values()) == pytest.approx(sum(ref.values()), rel=1e-7)


def test_group_lp_falls_back_to_simplex_when_ipm_stops(monkeypatch) -> None:
    p = jittered(20, 4, 1)
    monkeypatch.setattr(mm_pack_groups, "GROUP_MIN_CLASSES", 10**9)
    exact = allocate(p, NAME)
    monkeypatch.setattr(mm_pack_groups, "GROUP_MIN_CLASSES", 0)
    monkeypatch.setattr(mm_pack_groups, "HINT", False)
    seen = _spy_runs(monkeypatch, lambda lp: lp.h.setOptionValue("ipm_iteration_limit", 1))
    fast = allocate(p, NAME)
    assert seen[0][:2] == ["ipm", "dual"]  # IPM stopped after one iteration: simplex
    assert fast.violations(p) == []
    assert fast.objective == pytest.approx(exact.objective, rel=1e-7)
