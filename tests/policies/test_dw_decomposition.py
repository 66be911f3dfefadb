"""The decomposition of dw.py against HiGHS's plain class LP (mm_lp.py), on random
jittered problems: same optimum to 1e-9 relative, feasible allocations."""

from __future__ import annotations

import numpy as np
import pytest

from slurm_gavel.policies.solvers import dw
from slurm_gavel.policies.solvers.mm_lp import solve_max_min_classes

REL = 1e-9


def _problem(seed: int, n: int, k: int = 3, gpus: float = 8.0, zeros: float = 0.0):
    rng = np.random.default_rng(seed)
    base = rng.uniform(0.5, 2.0, size=(1, k)) * rng.uniform(0.8, 1.2, size=(n, k))
    coef = base * rng.choice([1.0, 2.0, 4.0], size=(n, 1))  # weights / scale factors
    allowed = rng.uniform(size=(n, k)) >= zeros
    scale = rng.choice([1.0, 1.0, 2.0, 4.0], size=n)
    capacity = np.full(k, gpus)
    allowed &= scale[:, None] <= capacity[None, :]
    return coef, allowed, scale, np.ones(n), capacity


def _check(coef, allowed, scale, count, capacity, second_stage: bool) -> None:
    ref = solve_max_min_classes(
        coef, allowed, scale, count, capacity, second_stage=second_stage, decompose=False
    )
    got = solve_max_min_classes(
        coef, allowed, scale, count, capacity, second_stage=second_stage, decompose=True
    )
    assert got.objective == pytest.approx(ref.objective, rel=REL, abs=1e-12)
    np.testing.assert_array_equal(got.runnable, ref.runnable)
    # feasible: time, capacity, no time where not allowed, everyone at the minimum
    assert (got.x >= 0).all() and (got.x.sum(axis=1) <= 1 + 1e-9).all()
    assert ((count * scale) @ got.x <= capacity * (1 + 1e-9)).all()
    assert (got.x[~allowed] == 0).all()
    assert (got.value[got.runnable] >= got.objective * (1 - 1e-9)).all()
    if second_stage:
        total = (count * got.value).sum()
        assert total == pytest.approx((count * ref.value).sum(), rel=1e-8)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("second_stage", [False, True])
def test_random_jittered(seed: int, second_stage: bool) -> None:
    _check(*_problem(seed, n=60, gpus=16.0, zeros=0.15), second_stage)


@pytest.mark.parametrize(
    "n,gpus",
    [(1, 8.0), (5, 64.0), (40, 4.0)],  # one job; more GPUs than jobs; scarce GPUs
)
def test_edge_sizes(n: int, gpus: float) -> None:
    for second_stage in (False, True):
        _check(*_problem(7, n=n, gpus=gpus), second_stage)


def test_unrunnable_and_zero_throughputs() -> None:
    coef, allowed, scale, count, capacity = _problem(3, n=30, zeros=0.4)
    allowed[:3] = False  # three jobs can run nowhere: left out of the minimum
    for second_stage in (False, True):
        _check(coef, allowed, scale, count, capacity, second_stage)


def test_class_counts() -> None:
    coef, allowed, scale, _, capacity = _problem(5, n=20, gpus=40.0)
    count = np.random.default_rng(1).integers(1, 6, size=20).astype(float)
    _check(coef, allowed, scale, count, capacity, True)


def test_min_beta_matches_scaling() -> None:
    """beta of the stretch LP: the primal value is the scaling x needs, the dual bound
    is below it within the certificate's gap, and the returned prices alone give that
    bound (each job's cheapest vertex at them, recomputed here). test_dw_certificate.py
    holds both sides against the exact LP."""
    coef, allowed, scale, _, capacity = _problem(11, n=50)
    w = np.full(50, 0.3)
    verts = dw.vertices(coef, allowed, w)
    res = dw.min_beta(verts, scale, capacity)
    assert float((scale @ res.x / capacity).max()) == pytest.approx(res.beta, rel=REL)
    assert ((coef * res.x).sum(axis=1) >= w * (1 - 1e-9)).all()
    assert res.dual_bound <= res.beta
    assert res.beta - res.dual_bound <= dw.CHECK_REL_GAP * res.beta
    cost = np.where(verts.valid, scale[:, None] * (verts.v @ res.lam), np.inf)
    at_lam = float(cost.min(axis=1).sum()) / float(res.lam @ capacity)
    assert res.dual_bound * (1 - REL) <= at_lam <= res.beta * (1 + 1e-12)


def _sum_lp(monkeypatch, coef, allowed, scale, count, capacity, decompose: bool):  # type: ignore[no-untyped-def]
    from slurm_gavel.policies.solvers import mm_lp

    calls = []
    real = mm_lp._sum_decomposed

    def spy(*args):  # type: ignore[no-untyped-def]
        calls.append(1)
        return real(*args)

    monkeypatch.setattr(mm_lp, "SUM_DW_MIN_COLUMNS", 1 if decompose else 10**12)
    monkeypatch.setattr(mm_lp, "_sum_decomposed", spy)
    x = mm_lp.solve_sum_classes(coef, allowed, scale, count, capacity)
    assert bool(calls) == decompose
    return x


@pytest.mark.parametrize("seed,n,gpus", [(0, 60, 16.0), (1, 5, 64.0), (2, 40, 4.0), (3, 80, 8.0)])
def test_max_sum_by_decomposition(monkeypatch, seed: int, n: int, gpus: float) -> None:  # type: ignore[no-untyped-def]
    """max_sum_throughput's LP (simplex per class) by dw.max_value == HiGHS's plain LP."""
    coef, allowed, scale, _, capacity = _problem(seed, n=n, gpus=gpus, zeros=0.2)
    count = np.random.default_rng(seed).integers(1, 4, size=n).astype(float)
    gain = np.where(allowed, coef * 1000.0, 0.0)  # steps/s: far from 1, as real rows are
    ref = _sum_lp(monkeypatch, gain, allowed, scale, count, capacity, decompose=False)
    got = _sum_lp(monkeypatch, gain, allowed, scale, count, capacity, decompose=True)
    total = lambda x: float((count[:, None] * gain * x).sum())  # noqa: E731
    assert total(got) == pytest.approx(total(ref), rel=REL)
    assert (got >= 0).all() and (got.sum(axis=1) <= 1 + 1e-9).all()
    assert ((count * scale) @ got <= capacity * (1 + 1e-9)).all()
    assert (got[~allowed] == 0).all()


@pytest.mark.parametrize("fail_at", [1, 2, 4])
@pytest.mark.parametrize("second_stage", [False, True])
def test_a_master_that_gives_up_leaves_pricing_to_the_restricted_lp(
    monkeypatch: pytest.MonkeyPatch, fail_at: int, second_stage: bool
) -> None:
    """HiGHS can stop the master with status Unknown (near-duplicate proposals): the
    prices found so far start the restricted LP, which still returns the certified
    optimum (before, the whole LP went to the plain solver: 36 times in the whole
    Philly trace with per-job rows)."""
    real = dw._Master.solve
    calls = {"n": 0}

    def solve(self):  # type: ignore[no-untyped-def]
        calls["n"] += 1
        if calls["n"] == fail_at:
            raise dw.DwStalled("master_status", "decomposition master: status 'Unknown'")
        return real(self)

    monkeypatch.setattr(dw._Master, "solve", solve)
    fell: list[str] = []
    from slurm_gavel.policies.solvers import mm_lp

    real_fell = mm_lp.fell_back
    monkeypatch.setattr(
        mm_lp,
        "fell_back",
        lambda lp, reason, detail, **kw: fell.append(reason) or real_fell(lp, reason, detail, **kw),
    )
    _check(*_problem(fail_at, n=60, gpus=16.0, zeros=0.15), second_stage)
    assert calls["n"] >= fail_at
    assert "master_status" not in fell
