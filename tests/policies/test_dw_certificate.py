"""The decomposition's certificates (policies/solvers/dw.py): every answer carries a
primal value and a bound from the dual side, checked here against the exact LP solved
whole by HiGHS (scipy's linprog) on many random problems, and refused, so that the
caller falls back to the plain LP, when the bound or the prices are wrong."""

from __future__ import annotations

import logging

import numpy as np
import pytest
from scipy.optimize import linprog

from slurm_gavel.policies.solvers import dw
from slurm_gavel.policies.solvers.mm_lp import solve_max_min_classes
from slurm_gavel.policies.solvers.solve_paths import recording

# The exact LPs' own error: HiGHS at 1e-10 feasibility tolerances.
EXACT = 1e-9
TIGHT = {"primal_feasibility_tolerance": 1e-10, "dual_feasibility_tolerance": 1e-10}


def _problem(seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(a, allowed, gpus, cap): 5-60 distinct jobs on 2-5 types, some cells not allowed,
    scarce to plentiful GPUs; every job can run somewhere."""
    rng = np.random.default_rng(seed)
    n = int(rng.choice([5, 20, 60]))
    k = int(rng.integers(2, 6))
    a = rng.uniform(0.5, 2.0, size=(1, k)) * rng.uniform(0.7, 1.3, size=(n, k))
    a *= rng.choice([1.0, 2.0, 4.0], size=(n, 1))
    allowed = rng.uniform(size=(n, k)) >= 0.2
    allowed[np.arange(n), rng.integers(0, k, size=n)] = True
    gpus = rng.choice([1.0, 1.0, 2.0, 4.0], size=n)
    cap = np.round(rng.uniform(0.02, 1.0) * gpus.sum() / k * rng.uniform(0.5, 1.5, size=k)) + 1.0
    return np.where(allowed, a, 0.0), allowed, gpus, cap


def _polytope_rows(a: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A_ub, b_ub of a_j . x_j >= w_j and sum_t x_jt <= 1 over x (N*K), row-major."""
    n, k = a.shape
    value = np.zeros((n, n * k))
    time = np.zeros((n, n * k))
    for j in range(n):
        value[j, j * k : (j + 1) * k] = -a[j]
        time[j, j * k : (j + 1) * k] = 1.0
    return np.vstack([value, time]), np.concatenate([-w, np.ones(n)])


def _capacity_rows(gpus: np.ndarray, k: int) -> np.ndarray:
    """(K, N*K): GPUs every x_jt uses of type t."""
    return np.kron(gpus[None, :], np.eye(k))


def _bounds(allowed: np.ndarray) -> list[tuple[float, float | None]]:
    return [(0.0, None) if ok else (0.0, 0.0) for ok in allowed.ravel()]


def exact_min_beta(a, allowed, gpus, cap, w) -> float:  # type: ignore[no-untyped-def]
    """min beta s.t. x_j in Q_j(w_j), sum_j g_j x_j <= beta cap: the whole LP."""
    n, k = a.shape
    rows, rhs = _polytope_rows(a, w)
    rows = np.hstack([rows, np.zeros((2 * n, 1))])
    capr = np.hstack([_capacity_rows(gpus, k), -cap[:, None]])
    c = np.zeros(n * k + 1)
    c[-1] = 1.0
    r = linprog(c, np.vstack([rows, capr]), np.concatenate([rhs, np.zeros(k)]),
                bounds=[*_bounds(allowed), (0.0, None)], method="highs", options=TIGHT)  # fmt: skip
    assert r.status == 0, r.message
    return float(r.fun)


def exact_max_min(a, allowed, gpus, cap) -> float:  # type: ignore[no-untyped-def]
    """max z s.t. a_j . x_j >= z, sum_t x_jt <= 1, sum_j g_j x_j <= cap: the whole LP."""
    n, k = a.shape
    rows, rhs = _polytope_rows(a, np.zeros(n))
    rows = np.hstack([rows, np.concatenate([np.ones(n), np.zeros(n)])[:, None]])
    capr = np.hstack([_capacity_rows(gpus, k), np.zeros((k, 1))])
    c = np.zeros(n * k + 1)
    c[-1] = -1.0
    r = linprog(c, np.vstack([rows, capr]), np.concatenate([rhs, cap]),
                bounds=[*_bounds(allowed), (0.0, None)], method="highs", options=TIGHT)  # fmt: skip
    assert r.status == 0, r.message
    return float(-r.fun)


def exact_max_value(a, allowed, gpus, cap, w, value) -> float:  # type: ignore[no-untyped-def]
    """max sum_j value_j . x_j s.t. x_j in Q_j(w_j), sum_j g_j x_j <= cap: the whole LP."""
    k = a.shape[1]
    rows, rhs = _polytope_rows(a, w)
    r = linprog(-value.ravel(), np.vstack([rows, _capacity_rows(gpus, k)]),
                np.concatenate([rhs, cap]), bounds=_bounds(allowed), method="highs",
                options=TIGHT)  # fmt: skip
    assert r.status == 0, r.message
    return float(-r.fun)


def lagrangian_beta(a, allowed, gpus, cap, w, lam) -> float:  # type: ignore[no-untyped-def]
    """The Lagrangian bound on beta* at prices lam, each job's own LP solved by HiGHS
    (not by dw.py's vertices): sum_j min_{x in Q_j} g_j lam . x / lam . cap."""
    total = 0.0
    for j in range(len(a)):
        r = linprog(gpus[j] * lam, [-a[j], np.ones(len(lam))], [-w[j], 1.0],
                    bounds=_bounds(allowed[j]), method="highs", options=TIGHT)  # fmt: skip
        assert r.status == 0, r.message
        total += float(r.fun)
    return total / float(lam @ cap)


def _levels(a: np.ndarray, seed: int) -> np.ndarray:
    """Per-job values every job can reach alone on its best type."""
    return np.random.default_rng(seed + 100).uniform(0.05, 1.0, len(a)) * a.max(axis=1)


@pytest.mark.parametrize("seed", range(30))
def test_min_beta_bound_is_a_valid_bound_within_the_gap(seed: int) -> None:
    a, allowed, gpus, cap = _problem(seed)
    w = _levels(a, seed)
    res = dw.min_beta(dw.vertices(a, allowed, w), gpus, cap)
    exact = exact_min_beta(a, allowed, gpus, cap, w)
    # dual bound <= beta* <= primal, and the two within the certificate's tolerance
    assert res.dual_bound <= exact * (1 + EXACT)
    assert exact <= res.beta * (1 + EXACT)
    assert res.beta - res.dual_bound <= dw.CHECK_REL_GAP * res.beta
    # the primal side is an allocation that needs res.beta times the cluster
    assert (gpus @ res.x <= res.beta * cap * (1 + 1e-9)).all()
    assert ((a * res.x).sum(axis=1) >= w * (1 - 1e-9)).all()
    assert (res.x.sum(axis=1) <= 1 + 1e-9).all() and (res.x[~allowed] == 0).all()
    # and the returned prices are a certificate anyone can check with their own LPs
    assert lagrangian_beta(a, allowed, gpus, cap, w, res.lam) >= res.beta * (1 - 1e-8)


@pytest.mark.parametrize("seed", range(30))
def test_max_min_bracket_holds_the_exact_optimum(seed: int) -> None:
    a, allowed, gpus, cap = _problem(seed)
    res = dw.max_min(a, allowed, gpus, cap)
    exact = exact_max_min(a, allowed, gpus, cap)
    assert res.z <= exact * (1 + EXACT)
    assert exact <= res.dual_bound * (1 + EXACT)
    assert res.dual_bound - res.z <= dw.CHECK_REL_GAP * res.dual_bound
    assert ((a * res.x).sum(axis=1) >= res.z * (1 - 1e-9)).all()
    assert (gpus @ res.x <= cap * (1 + 1e-9)).all()


@pytest.mark.parametrize("seed", range(30))
def test_max_value_bound_is_a_valid_bound_within_the_gap(seed: int) -> None:
    """Stage 2 of max-min (every job held at the minimum, the total value maximised)."""
    a, allowed, gpus, cap = _problem(seed)
    first = dw.max_min(a, allowed, gpus, cap)
    w = np.full(len(a), first.z * (1 - 1e-9))
    value = a * np.random.default_rng(seed).choice([1.0, 3.0], size=(len(a), 1))
    start = first.x * (w / first.z)[:, None]  # every job at w: feasible
    res = dw.max_value(dw.vertices(a, allowed, w), value, gpus, cap, start)
    exact = exact_max_value(a, allowed, gpus, cap, w, value)
    assert res.value <= exact * (1 + EXACT)
    assert exact <= res.dual_bound * (1 + EXACT)
    assert res.dual_bound - res.value <= dw.CHECK_REL_GAP * res.value
    assert float((value * res.x).sum()) == pytest.approx(res.value, rel=1e-9)


# --- Wrong certificates must fail ------------------------------------------------------


def _inflated_bound(monkeypatch: pytest.MonkeyPatch, factor: float) -> None:
    """Every Lagrangian bound dw computes, scaled: > 1 puts a min problem's bound past
    its primal value (an invalid bound), < 1 makes it too weak to certify anything."""
    real = dw._bound
    monkeypatch.setattr(dw, "_bound", lambda *args: real(*args) * factor)


def test_a_bound_past_the_primal_value_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    a, allowed, gpus, cap = _problem(3)
    verts = dw.vertices(a, allowed, _levels(a, 3))
    dw.min_beta(verts, gpus, cap)  # certified as it is
    _inflated_bound(monkeypatch, 1 + 1e-6)
    with pytest.raises(dw.DwStalled) as e:
        dw.min_beta(verts, gpus, cap)
    assert e.value.reason == "bound_crosses_primal"


def test_a_bound_too_weak_to_certify_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    a, allowed, gpus, cap = _problem(3)
    verts = dw.vertices(a, allowed, _levels(a, 3))
    _inflated_bound(monkeypatch, 1 - 1e-6)
    with pytest.raises(dw.DwStalled) as e:
        dw.min_beta(verts, gpus, cap)
    assert e.value.reason == "gap_open"


class _SkewedDuals:
    """A HiGHS instance whose row duals come back wrong on the capacity rows: prices
    that no longer prove anything (the bound they give is valid but weak)."""

    def __init__(self, h: object, skew: np.ndarray) -> None:
        self._h = h
        self._skew = skew

    def __getattr__(self, name: str) -> object:
        return getattr(self._h, name)

    def getSolution(self) -> object:
        sol = self._h.getSolution()  # type: ignore[attr-defined]
        duals = np.asarray(sol.row_dual, dtype=float)
        k = len(self._skew)
        duals[:k] = duals[:k] * self._skew
        sol.row_dual = list(duals)
        return sol


def _skew_duals(monkeypatch: pytest.MonkeyPatch, skew: np.ndarray) -> None:
    real = dw._new_highs
    monkeypatch.setattr(dw, "_new_highs", lambda: _SkewedDuals(real(), skew))


def test_corrupted_prices_cannot_certify(monkeypatch: pytest.MonkeyPatch) -> None:
    a, allowed, gpus, cap = _problem(5)
    k = a.shape[1]
    verts = dw.vertices(a, allowed, _levels(a, 5))
    _skew_duals(monkeypatch, np.linspace(3.0, 0.2, k))
    with pytest.raises(dw.DwStalled) as e:
        dw.min_beta(verts, gpus, cap)
    assert e.value.reason in ("gap_open", "pricing_unsettled")


def _bad_min_beta(monkeypatch: pytest.MonkeyPatch, **change: float) -> None:
    """min_beta's answers with a field changed after its own check (dual_bound: a
    wrong bound; x_scale: an allocation that needs more GPUs than it says)."""
    real = dw.min_beta

    def bad(*args, **kwargs):  # type: ignore[no-untyped-def]
        r = real(*args, **kwargs)
        bound = r.dual_bound * change.get("dual_bound", 1.0)
        return dw.BetaResult(r.beta, bound, r.x * change.get("x_scale", 1.0), r.slope, r.lam)

    monkeypatch.setattr(dw, "min_beta", bad)


def test_max_min_refuses_a_dual_bound_that_does_not_close(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """min_beta's bounds 1% too weak (valid, but they prove z* only to ~1%): max_min's
    bracket on z* cannot close to its tolerance, so no answer."""
    a, allowed, gpus, cap = _problem(7)
    _bad_min_beta(monkeypatch, dual_bound=0.99)
    with pytest.raises(dw.DwStalled) as e:
        dw.max_min(a, allowed, gpus, cap)
    assert e.value.reason == "bracket_open"


def test_max_min_refuses_an_infeasible_allocation(monkeypatch: pytest.MonkeyPatch) -> None:
    a, allowed, gpus, cap = _problem(7)
    _bad_min_beta(monkeypatch, x_scale=1.01)
    with pytest.raises(dw.DwStalled) as e:
        dw.max_min(a, allowed, gpus, cap)
    assert e.value.reason == "primal_infeasible"


@pytest.mark.parametrize("second_stage", [False, True])
def test_a_refused_certificate_falls_back_to_the_plain_lp(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, second_stage: bool
) -> None:
    """The max-min LP with a wrong bound: the plain LP's answer, the fallback recorded
    with its reason and logged."""
    a, allowed, gpus, cap = _problem(11)
    n = len(a)
    args = (a, allowed, gpus, np.ones(n), cap)
    ref = solve_max_min_classes(*args, second_stage=second_stage, decompose=False)
    with recording() as paths:
        solve_max_min_classes(*args, second_stage=second_stage, decompose=True)
    assert paths.decomposed == ["max_min"] and paths.fallbacks == []
    _inflated_bound(monkeypatch, 1 + 1e-6)
    with recording() as paths, caplog.at_level(logging.WARNING):
        got = solve_max_min_classes(*args, second_stage=second_stage, decompose=True)
    assert paths.decomposed == []
    assert [(f.lp, f.reason) for f in paths.fallbacks] == [("max_min", "bound_crosses_primal")]
    assert "max_min LP" in caplog.text and "bound_crosses_primal" in caplog.text
    np.testing.assert_array_equal(got.x, ref.x)  # the plain LP's own vertex


def test_certify_sides_and_tolerances() -> None:
    """The check itself, by hand: which side the bound must be on for each sense, the
    relative tolerance, and an optimum of 0 (rounding only)."""
    dw.certify("t", 1.0, 1.0 - 1e-10, minimise=True)  # bound below a min's primal: ok
    dw.certify("t", 1.0, 1.0 + 1e-10, minimise=False)  # above a max's primal: ok
    dw.certify("t", 0.0, -1e-17, minimise=True)
    for primal, bound, minimise, reason in [
        (1.0, 1.0 - 1e-8, True, "gap_open"),
        (1.0, 1.0 + 1e-8, True, "bound_crosses_primal"),
        (1.0, 1.0 + 1e-8, False, "gap_open"),
        (1.0, 1.0 - 1e-8, False, "bound_crosses_primal"),
        (1.0, float("nan"), True, "bound_crosses_primal"),
        (1.0, -float("inf"), True, "gap_open"),
    ]:
        with pytest.raises(dw.DwStalled) as e:
            dw.certify("t", primal, bound, minimise=minimise)
        assert e.value.reason == reason, (primal, bound, minimise)
