"""mm_lp_single's direct HiGHS path returns the general path's vertex bit for bit."""

from __future__ import annotations

import numpy as np
import pytest

from slurm_gavel.policies.solvers.classes import fairness_coefficients, group_jobs
from slurm_gavel.policies.solvers.mm_lp import solve_max_min_classes
from slurm_gavel.policies.solvers.mm_policy import agnostic_throughput
from slurm_gavel.simulate.synthetic import random_problem

# HiGHS's own defaults for the options lp.SMALL_LP_OPTIONS sets (its dual simplex)
HIGHS_DEFAULTS = {"presolve": "choose", "simplex_strategy": 1}


def _class_lp(n: int, cluster: dict[str, int], seed: int) -> tuple:
    """The class max-min LP's arguments for a random problem's classes and table rows."""
    classes = group_jobs(random_problem(n, cluster, seed=seed))
    coef = fairness_coefficients(classes, classes.throughput)
    return (coef, classes.allowed(), classes.scale, classes.count, classes.capacity)


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
        probs.append(_class_lp(30, {"v100": 3, "p100": 2, "k80": 4}, seed=seed))
    first = [solve_max_min_classes(*a) for a in probs]
    again = [solve_max_min_classes(*a) for a in reversed(probs)][::-1]
    for a, b in zip(first, again, strict=True):
        _same(a, b)


def test_small_lp_options_reach_the_default_solvers_optimum() -> None:
    # SMALL_LP_OPTIONS (primal simplex, no presolve) may end at another point of a
    # degenerate optimal face than HiGHS's default dual simplex, never at a worse one:
    # both stages' objectives agree within the stage-2 slack.
    import slurm_gavel.policies.solvers.lp as lp

    rng = np.random.default_rng(1)
    cases = []
    for seed in range(30):
        n = int(rng.integers(2, 60))
        cluster = {t: int(rng.integers(1, 8)) for t in ("v100", "p100", "k80")}
        p = random_problem(n, cluster, seed=seed)
        classes = group_jobs(p)
        # every class its own row, as with per-job rows (no two alike)
        coef = fairness_coefficients(classes, classes.throughput)
        coef = coef * rng.uniform(0.7, 1.3, coef.shape)
        cases.append((coef, classes.allowed(), classes.scale, classes.count, classes.capacity))
    fast = [solve_max_min_classes(*a) for a in cases]
    saved = dict(lp.SMALL_LP_OPTIONS)
    try:  # HiGHS's defaults set explicitly: the reused instance keeps what was set last
        lp.SMALL_LP_OPTIONS.update(HIGHS_DEFAULTS)
        plain = [solve_max_min_classes(*a) for a in cases]
    finally:
        lp.SMALL_LP_OPTIONS.update(saved)
    assert saved == {"presolve": "off", "simplex_strategy": 4}
    assert any(not np.array_equal(f.x, d.x) for f, d in zip(fast, plain, strict=True))
    for a, f, d in zip(cases, fast, plain, strict=True):
        count = a[3]
        assert f.objective == pytest.approx(d.objective, rel=2e-9)
        assert (count * f.value).sum() == pytest.approx((count * d.value).sum(), rel=1e-8)
        assert (f.x.sum(axis=1) <= 1 + 1e-9).all()
        assert (((a[2] * count)[:, None] * f.x).sum(axis=0) <= a[4] + 1e-9).all()


def test_a_small_lp_run_that_stops_short_falls_back_to_the_defaults(monkeypatch) -> None:
    # SMALL_LP_OPTIONS are a speed choice: where a run under them ends short of an
    # optimum (here forced by an iteration limit of 0), the LP is solved again with
    # HiGHS's defaults for those options, not reported as a failed round.
    import slurm_gavel.policies.solvers.lp as lp

    args = _class_lp(40, {"v100": 4, "p100": 3, "k80": 5}, seed=3)
    expected = solve_max_min_classes(*args)
    monkeypatch.setitem(lp.SMALL_LP_OPTIONS, "simplex_iteration_limit", 0)
    got = solve_max_min_classes(*args)
    assert got.objective == pytest.approx(expected.objective, rel=2e-9)
    count = args[3]
    assert (count * got.value).sum() == pytest.approx((count * expected.value).sum(), rel=1e-8)
    # and the next solve, under the same options, falls back again rather than failing
    assert solve_max_min_classes(*args).objective == pytest.approx(expected.objective, rel=2e-9)


def test_a_small_lp_past_its_time_limit_still_fails() -> None:
    import slurm_gavel.policies.solvers.lp as lp

    args = _class_lp(40, {"v100": 4, "p100": 3, "k80": 5}, seed=3)
    with pytest.raises(lp.SolverError, match=r"stage 1.*[Tt]ime limit"):
        solve_max_min_classes(*args, time_limit=0.0)


def test_flat_rows_keep_the_default_solvers_vertex(monkeypatch) -> None:
    # An LP whose classes value all their types alike (type-blind rows) has a whole
    # face of optima, and the vertex decides each job's split and total: it is solved
    # under HiGHS's defaults, exactly as before SMALL_LP_OPTIONS, and a class LP with
    # one class of distinct rows among them is not flat.
    import slurm_gavel.policies.solvers.lp as lp
    from slurm_gavel.policies.solvers.mm_lp import flat_rows

    rng = np.random.default_rng(2)
    for seed in range(10):
        p = random_problem(int(rng.integers(5, 60)), {"v100": 3, "p100": 4, "k80": 6}, seed=seed)
        classes = group_jobs(p)
        tput = agnostic_throughput(classes.throughput) * rng.uniform(1, 5, (classes.n_classes, 1))
        coef = fairness_coefficients(classes, tput)
        args = (coef, classes.allowed(), classes.scale, classes.count, classes.capacity)
        assert flat_rows(coef, args[1])
        bumped = coef.copy()
        bumped[0, np.argmax(args[1][0])] *= 1.01
        assert not flat_rows(bumped, args[1]) or args[1][0].sum() == 1
        now = [solve_max_min_classes(*args, second_stage=s) for s in (True, False)]
        with monkeypatch.context() as m:
            m.setattr(lp, "SMALL_LP_OPTIONS", dict(HIGHS_DEFAULTS))
            before = [solve_max_min_classes(*args, second_stage=s) for s in (True, False)]
        for a, b in zip(now, before, strict=True):
            _same(a, b)
