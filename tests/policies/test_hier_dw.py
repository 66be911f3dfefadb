"""hierarchical_max_min_fairness's first level by decomposition (hier_dw.py) against the
HiGHS level LP: same per-job values and first level on small problems with no two jobs
alike (with and without accounts, so later levels run in HiGHS after it), the
decomposition really ran, and a dual that is not optimal is refused."""

from __future__ import annotations

import numpy as np
import pytest
from answer_spy import spy_answers
from distinct_rows import jitter_rows

from slurm_gavel.domain.model import Problem
from slurm_gavel.policies import PolicyOptions, allocate
from slurm_gavel.policies.solvers import dw, hier_dw

NAME = "hierarchical_max_min_fairness"


def distinct(n: int, gpus: int, seed: int, accounts: dict[str, float] | None) -> Problem:
    from slurm_gavel.simulate.synthetic import random_problem

    p = random_problem(n, gpus, seed=seed, accounts=accounts, weights=(1.0, 2.0))
    return jitter_rows(p, seed + 7)


def _run(monkeypatch: pytest.MonkeyPatch, p: Problem, decompose: bool, ran: bool | None = None):  # type: ignore[no-untyped-def]
    monkeypatch.setattr(hier_dw, "DW_MIN_CELLS", 1 if decompose else 10**12)
    target = "slurm_gavel.policies.solvers.hier_water_filling.first_level_dw"
    used = spy_answers(monkeypatch, target, hier_dw.first_level)
    alloc = allocate(p, NAME, PolicyOptions())
    assert used == [decompose if ran is None else ran]
    return alloc


def _values(p: Problem, alloc) -> np.ndarray:  # type: ignore[no-untyped-def]
    return np.array([alloc.effective_throughput(p, j.id) for j in p.jobs])


@pytest.mark.parametrize(
    "seed,n,gpus,accounts",
    [
        (0, 60, 8, None),
        (1, 150, 20, None),
        (2, 80, 6, {"a": 2.0, "b": 1.0, "c": 0.5}),
        (3, 90, 10, {"a": 1.0, "b": 3.0}),
    ],
)
def test_first_level_matches_highs(
    monkeypatch: pytest.MonkeyPatch, seed: int, n: int, gpus: int, accounts
) -> None:  # type: ignore[no-untyped-def]
    p = distinct(n, gpus, seed, accounts)
    ref = _run(monkeypatch, p, decompose=False)
    got = _run(monkeypatch, p, decompose=True)
    assert got.objective == pytest.approx(ref.objective, rel=1e-8)
    # water filling's per-job values are unique: the two must agree job by job
    np.testing.assert_allclose(_values(p, got), _values(p, ref), rtol=1e-6, atol=1e-9)
    assert got.violations(p) == []


def test_wrong_prices_are_refused() -> None:
    rng = np.random.default_rng(4)
    a = rng.uniform(0.5, 2.0, size=(30, 3))
    allowed = np.ones((30, 3), dtype=bool)
    g = np.ones(30)
    cap = np.full(3, 6.0)
    res = dw.max_min(a, allowed, g, cap)
    z, lam = res.z, res.lam
    assert hier_dw._certified_duals(a, allowed, g, cap, z, lam) is not None
    skewed = lam * np.array([3.0, 0.2, 1.0])
    skewed /= skewed @ cap
    assert hier_dw._certified_duals(a, allowed, g, cap, z, skewed) is None


def test_plentiful_gpus_fall_back_to_highs(monkeypatch: pytest.MonkeyPatch) -> None:
    """More GPUs than jobs: the level is each job alone on its best type, the capacity
    prices are 0 and the certificate fails; the HiGHS level LP gives the same answer."""
    p = distinct(40, 40, 3, {"a": 1.0, "b": 3.0})
    ref = _run(monkeypatch, p, decompose=False)
    got = _run(monkeypatch, p, decompose=True, ran=False)
    np.testing.assert_allclose(_values(p, got), _values(p, ref), rtol=1e-9)


def test_only_proven_bottlenecks_get_a_dual() -> None:
    """y_j > 0 only where y_j * margin_j exceeds the certificate's gap: with a zero
    margin nothing is proven (the caller's bottleneck LP decides), with a wide one
    every class with a positive dual is."""
    rng = np.random.default_rng(5)
    coef = rng.uniform(0.5, 2.0, size=(40, 3))
    gpus, cap = np.ones(40), np.full(3, 4.0)  # scarce: the capacity rows bind
    rise, live = np.full(40, 1.0 / 40), np.ones(40, dtype=bool)
    hier_dw_cells = hier_dw.DW_MIN_CELLS
    try:
        hier_dw.DW_MIN_CELLS = 1
        none = hier_dw.first_level(coef, gpus, cap, rise, live, np.zeros_like)
        wide = hier_dw.first_level(coef, gpus, cap, rise, live, lambda lv: np.ones_like(lv))
    finally:
        hier_dw.DW_MIN_CELLS = hier_dw_cells
    assert none is not None and wide is not None
    assert (none[2] == 0).all()
    assert (wide[2] > 0).sum() > 0
    assert none[0] == wide[0]
