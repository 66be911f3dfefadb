"""hierarchical_max_min_fairness along its own path (hier_parametric.py) against the LP
loop of hier_water_filling: the same water filling on small problems with no two jobs
alike, with accounts, where the path ends the water filling (GPUs scarce: one capacity
level freezes the rest; plentiful: every job alone on its best type) and where the LP
loop has to go on from the path's state (one type plentiful, so its price is 0 and
not every job is proven bottlenecked). A spy checks which of these really ran."""

from __future__ import annotations

import dataclasses
import functools
import itertools

import numpy as np
import pytest
from distinct_rows import jitter_rows

from slurm_gavel.domain.model import Problem
from slurm_gavel.errors import SolveError
from slurm_gavel.policies import PolicyOptions, allocate
from slurm_gavel.policies import hierarchical_max_min_fairness as hmmf
from slurm_gavel.policies.solvers import hier_parametric as hp
from slurm_gavel.policies.solvers import hier_water_filling as hw

NAME = "hierarchical_max_min_fairness"
LEVELS: list[np.ndarray] = []
ACCOUNTS = {"a": 2.0, "b": 1.0, "c": 0.5}


def distinct(n: int, cluster: dict[str, int], seed: int) -> Problem:
    from slurm_gavel.simulate.synthetic import random_problem

    p = random_problem(n, 10, seed=seed, accounts=ACCOUNTS, weights=(1.0, 2.0))
    return jitter_rows(p, seed + 7, cluster=cluster)


def _run(monkeypatch: pytest.MonkeyPatch, p: Problem, on: bool) -> tuple[np.ndarray, float, list]:  # type: ignore[type-arg]
    """(per-job values, first level, what the path did); the classes' levels (the water
    filling's answer) are in LEVELS[-1] after it."""
    seen: list = []  # type: ignore[type-arg]
    real, real_cross, real_fill = hp.parametric_fill, hp._cross, hmmf.water_fill
    crossings = []

    def fill(*args, **kwargs):  # type: ignore[no-untyped-def]
        out = real_fill(*args, **kwargs)
        LEVELS.append(out.level)
        return out

    def spy(*args, **kwargs):  # type: ignore[no-untyped-def]
        out = real(*args, **kwargs)
        seen.append(None if out is None else (out.complete, len(crossings)))
        return out

    def count(*args):  # type: ignore[no-untyped-def]
        crossings.append(1)
        return real_cross(*args)

    monkeypatch.setattr(hp, "DW_MIN_CELLS", 1 if on else 10**12)
    monkeypatch.setattr(hw, "parametric_fill", spy)
    monkeypatch.setattr(hp, "_cross", count)
    monkeypatch.setattr(hmmf, "water_fill", fill)
    alloc = allocate(p, NAME)
    assert alloc.violations(p) == []
    values = np.array([alloc.effective_throughput(p, j.id) for j in p.jobs])
    return values, float(alloc.objective or 0.0), seen


SCARCE = {"v100": 10, "p100": 10, "k80": 10}
PLENTY = {"v100": 200, "p100": 200, "k80": 200}
ONE_PLENTIFUL = {"v100": 2, "p100": 2, "k80": 200}
SKEWED = {"v100": 40, "p100": 3, "k80": 3}


@pytest.mark.parametrize(
    "cluster,seed,complete,crossings",
    [
        (SCARCE, 0, True, 1),  # one capacity level freezes every job left
        (SCARCE, 1, True, 1),
        (PLENTY, 0, True, 1),  # every job full on its best type: no capacity level
        (SKEWED, 0, True, 1),
        (SKEWED, 1, True, 2),  # jobs left unproven rise again along a new path
        # k80's price is 0 at the first crossing: the jobs left are proven where they
        # are full on it, and a second path takes them there (it took 38 crossings,
        # one proof each, and then the LP loop)
        (ONE_PLENTIFUL, 0, True, 2),
        (ONE_PLENTIFUL, 1, True, 2),
        (ONE_PLENTIFUL, 2, True, 2),
    ],
)
def test_path_matches_the_lp_loop(
    monkeypatch: pytest.MonkeyPatch,
    cluster: dict[str, int],
    seed: int,
    complete: bool,
    crossings: int,
) -> None:
    p = distinct(80, cluster, seed)
    ref, ref_first, seen_ref = _run(monkeypatch, p, on=False)
    ref_level = LEVELS[-1]
    got, got_first, seen = _run(monkeypatch, p, on=True)
    got_level = LEVELS[-1]
    assert seen_ref == [None]
    assert seen == [(complete, crossings)]
    assert got_first == pytest.approx(ref_first, rel=1e-8)
    # Levels agree to the solvers' tolerances; a job within the bottleneck margin (1e-4
    # relative) of its maximum (or of where its crossing proved it bottlenecked) when
    # another freezes may freeze there in one and rise to it in the other. Values may
    # exceed levels by spare capacity that no level needs, wherever the solver put it.
    np.testing.assert_allclose(got_level, ref_level, rtol=2 * hp.MARGIN, atol=1e-9)
    assert got_level.sum() == pytest.approx(ref_level.sum(), rel=1e-6)
    assert (np.abs(got_level - ref_level) > 1e-7 * ref_level).sum() <= 1
    np.testing.assert_allclose(got, ref, rtol=2 * hp.MARGIN, atol=1e-9)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_lp_loop_goes_on_from_the_paths_state(
    monkeypatch: pytest.MonkeyPatch, seed: int
) -> None:
    """After MAX_ROUNDS crossings the path hands its state (levels, frozen jobs) to the
    LP loop, which finishes the same water filling. Forced here after one crossing on a
    cluster that needs two."""
    p = distinct(80, ONE_PLENTIFUL, seed)
    _, ref_first, _ = _run(monkeypatch, p, on=False)
    ref_level = LEVELS[-1]
    monkeypatch.setattr(hp, "MAX_ROUNDS", 1)
    _, got_first, seen = _run(monkeypatch, p, on=True)
    assert seen == [(False, 1)]
    assert got_first == pytest.approx(ref_first, rel=1e-8)
    np.testing.assert_allclose(LEVELS[-1], ref_level, rtol=2 * hp.MARGIN, atol=1e-9)
    assert LEVELS[-1].sum() == pytest.approx(ref_level.sum(), rel=1e-6)


def test_caps_are_kept_only_where_they_are_proven() -> None:
    """_free_caps: a job that costs nothing at the crossing's prices is capped where it
    is full on its best unpriced type, if it then needs a priced one to rise; not a job
    whose best type is priced but already costs something now, and not one whose proof
    there fails against the gap."""
    a = np.array([[2.0, 1.0], [2.0, 1.0], [0.5, 1.0], [2.0, 1.0]])
    allowed = a > 0
    g = np.ones(4)
    lam = np.array([0.5, 0.0])  # type 0 priced, type 1 free
    level = np.array([0.5, 1.5, 0.5, 0.5])
    unproven = np.array([True, True, True, False])
    cap = hp._free_caps(a, allowed, g, lam, level, unproven, gap=1e-12)
    # job 0: free best 1.0 >= 0.5, costs 0 now, needs type 0 above 1.0: capped at 1.0
    # job 1: above its free best already (costs something): no cap
    # job 2: its best type is the free one: full there is its own maximum, no y > 0
    # job 3: proven already (not a candidate)
    assert cap.tolist() == [1.0, np.inf, np.inf, np.inf]
    # a gap wider than what lifting it by the margin costs: no proof, no cap
    assert np.isinf(hp._free_caps(a, allowed, g, lam, level, unproven, gap=1.0)).all()


def test_a_dual_at_rounding_level_proves_no_bottleneck(monkeypatch: pytest.MonkeyPatch) -> None:
    """The LP loop freezes a job on its level LP's dual only where lifting it by its
    margin would cost more than rounding. 300 jobs, each throughput scaled by its own
    factor (as bench_allocate's --jitter), 180 GPUs a type: at a degenerate vertex HiGHS
    gave duals of ~1e-9 to jobs that were no bottleneck, and the loop froze 9 of them
    up to 36 % below where the path (and the loop without that dual) puts them."""
    from slurm_gavel.simulate.synthetic import random_problem

    p = random_problem(300, 180, seed=2, weights=(1.0, 2.0), accounts=ACCOUNTS)
    rng = np.random.default_rng(3)
    jobs = tuple(
        dataclasses.replace(
            j, throughput={t: v * float(rng.uniform(0.8, 1.2)) for t, v in j.throughput.items()}
        )
        for j in p.jobs
    )
    p = dataclasses.replace(p, jobs=jobs)
    _run(monkeypatch, p, on=False)
    loop = LEVELS[-1]
    _, _, seen = _run(monkeypatch, p, on=True)
    assert seen and seen[0] is not None and seen[0][0]  # the path ended it
    np.testing.assert_allclose(loop, LEVELS[-1], rtol=2 * hp.MARGIN, atol=1e-9)


def test_a_bottleneck_lp_called_infeasible_is_asked_again_just_below(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The levels a level LP just reached sit on its boundary; where HiGHS calls the
    bottleneck LP infeasible there by its rounding, it is asked again 1e-9 below them
    (it ended the water filling with no allocation)."""
    p = distinct(80, SKEWED, 1)
    ref, _, _ = _run(monkeypatch, p, on=False)
    real = hw._ClassLp.solve
    refused: list[str] = []

    def solve(self, level, gain, what):  # type: ignore[no-untyped-def]
        if what == "bottleneck" and not refused:
            refused.append(what)
            raise hw.WaterFillingError("bottleneck LP failed (HiGHS status 'Infeasible')")
        return real(self, level, gain, what)

    monkeypatch.setattr(hw._ClassLp, "solve", solve)
    got, _, _ = _run(monkeypatch, p, on=False)
    assert refused == ["bottleneck"]
    np.testing.assert_allclose(got, ref, rtol=1e-6, atol=1e-9)


def test_path_events_by_hand() -> None:
    """One entity (weight 1) with jobs of weight 1 and unit 1, maxima 1 and 3; a second
    entity (weight 2) with one job, maximum 4. Entity 0: both rise at 1/2 per unit tau
    until job 0 is full at tau 2, then job 1 at 1 per unit until 3 at tau 4; entity 1's
    job rises at 2 per unit and is full at tau 2 (the same event)."""
    pth = hp.path(
        maximum=np.array([1.0, 3.0, 4.0]),
        unit=np.ones(3),
        live_weight=np.ones(3),
        entity=np.array([0, 0, 1]),
        entity_weight=np.array([1.0, 2.0]),
        frozen=np.zeros(3, dtype=bool),
        start=np.zeros(3),
    )
    np.testing.assert_allclose(pth.tau, [2.0, 4.0])
    assert pth.froze_at.tolist() == [0, 1, 0]
    np.testing.assert_allclose(pth.final, [1.0, 3.0, 4.0])
    level, frozen = pth.at(3.0)
    np.testing.assert_allclose(level, [1.0, 2.0, 4.0])
    assert frozen.tolist() == [True, False, True]
    level, frozen = pth.at(1.0)
    np.testing.assert_allclose(level, [0.5, 0.5, 2.0])
    assert not frozen.any()


def test_margin_freezes_near_full_jobs_together() -> None:
    """A job within the margin (1e-4 relative) of its maximum when another fills freezes
    at that event, as the LP loop freezes every job that cannot rise by the margin."""
    pth = hp.path(
        maximum=np.array([1.0, 1.00005, 2.0]),
        unit=np.ones(3),
        live_weight=np.ones(3),
        entity=np.zeros(3, dtype=np.int64),
        entity_weight=np.array([1.0]),
        frozen=np.zeros(3, dtype=bool),
        start=np.zeros(3),
    )
    assert pth.froze_at.tolist() == [0, 0, 1]
    np.testing.assert_allclose(pth.final, [1.0, 1.0, 2.0])


def test_zero_weights_take_the_lp_loop() -> None:
    coef = np.ones((600, 3))
    one = np.ones(600)
    args = (coef, one, one, one, np.zeros(600, dtype=np.int64))
    assert hp.parametric_fill(*args, np.array([0.0]), np.full(3, 10.0)) is None
    assert hp.parametric_fill(*args, np.array([1.0]), np.full(3, 10.0)) is not None


@pytest.mark.parametrize("cluster", [SCARCE, SKEWED])
def test_classes_of_several_jobs(monkeypatch: pytest.MonkeyPatch, cluster: dict[str, int]) -> None:
    """Rows from the table, not jittered: jobs form classes of several (same row, scale
    factor, weight and account), which the path counts in their entity's weight and
    their GPUs; the same water filling as the LP loop."""
    from slurm_gavel.simulate.synthetic import random_problem

    p = random_problem(300, 10, seed=4, accounts=ACCOUNTS, weights=(1.0, 2.0))
    p = dataclasses.replace(p, cluster=cluster)
    kinds = {(j.job_type, j.scale_factor, j.priority_weight, j.account) for j in p.jobs}
    assert len(kinds) < 0.7 * len(p.jobs)  # classes of several jobs (179 kinds)
    ref, ref_first, _ = _run(monkeypatch, p, on=False)
    got, got_first, seen = _run(monkeypatch, p, on=True)
    assert seen and seen[0] is not None and seen[0][0]  # the path ended it
    assert got_first == pytest.approx(ref_first, rel=1e-8)
    np.testing.assert_allclose(got, ref, rtol=2 * hp.MARGIN, atol=1e-9)
    assert got.sum() == pytest.approx(ref.sum(), rel=1e-6)


def test_a_failed_hand_over_falls_back_to_the_exact_loop(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """When the LP loop cannot go on from the path's state (seen once at 10,000 jobs on
    a cluster with one plentiful type: a bottleneck LP infeasible), the water filling
    starts the exact loop afresh instead of returning no allocation."""
    p = distinct(80, ONE_PLENTIFUL, 0)
    ref, ref_first, _ = _run(monkeypatch, p, on=False)
    real_loop = hw._lp_loop
    starts: list[int] = []

    def loop(cls, frozen, level, x, first_level, iterations, limit, deadline):  # type: ignore[no-untyped-def]
        starts.append(iterations)
        if iterations > 0:  # the hand-over from the path's state
            raise hw.WaterFillingError("bottleneck LP infeasible (injected)")
        return real_loop(cls, frozen, level, x, first_level, iterations, limit, deadline)

    monkeypatch.setattr(hw, "_lp_loop", loop)
    monkeypatch.setattr(hp, "MAX_ROUNDS", 1)
    got, got_first, seen = _run(monkeypatch, p, on=True)
    assert seen == [(False, 1)]  # the path handed over, as in the case above
    assert starts[0] > 0 and starts[1:] == [0]  # then one exact loop from the start
    assert "hand-over failed" in caplog.text
    assert got_first == pytest.approx(ref_first, rel=1e-8)
    np.testing.assert_allclose(got, ref, rtol=1e-9, atol=1e-12)


def test_a_time_limit_of_zero_stops_the_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """PolicyOptions.time_limit reaches the path: at 0 it stops before its first
    decomposition solve with a SolveError (the round fails and the last allocation
    stands), as the other solvers' HiGHS LPs stop at theirs. The message names the
    water filling (one deadline for the whole solve, deadline.py), not the path."""
    p = distinct(80, SKEWED, 1)
    monkeypatch.setattr(hp, "DW_MIN_CELLS", 1)
    loops: list[int] = []
    monkeypatch.setattr(hw, "_lp_loop", lambda *a: loops.append(1))
    with pytest.raises(SolveError, match=r"hierarchical water filling: the solver time limit of 0"):
        allocate(p, NAME, PolicyOptions(time_limit=0.0))
    assert loops == []  # no hand-over to the LP loop, which would only take longer


def test_the_time_limit_is_read_before_each_highs_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """On a clock that advances 1 s per reading, a limit of 3.5 s stops the path at the
    fourth HiGHS run of its min_beta solves (within the first crossing: the start, then
    2.5, 1.5, 0.5 s left, then none); a limit it never reaches changes nothing."""
    p = distinct(80, SKEWED, 1)  # two crossings, several solves each
    ref, ref_first, _ = _run(monkeypatch, p, on=True)
    readings: list[int] = []

    def clock_from_zero() -> float:
        readings.append(1)
        return float(len(readings) - 1)

    real, real_beta = hw.water_fill, hp.min_beta
    betas: list[int] = []
    monkeypatch.setattr(hp, "min_beta", lambda *a, **k: betas.append(1) or real_beta(*a, **k))
    monkeypatch.setattr(hmmf, "water_fill", functools.partial(real, clock=clock_from_zero))
    with pytest.raises(SolveError, match=r"time limit of 3.5 s was reached; no allocation"):
        allocate(p, NAME, PolicyOptions(time_limit=3.5))
    assert len(readings) == 5
    assert 1 <= len(betas) < 4  # min_beta solves run HiGHS more than once each
    ticks = itertools.count()
    monkeypatch.setattr(
        hmmf, "water_fill", functools.partial(real, clock=lambda: float(next(ticks)))
    )
    alloc = allocate(p, NAME, PolicyOptions(time_limit=1e6))
    got = np.array([alloc.effective_throughput(p, j.id) for j in p.jobs])
    assert 5 < next(ticks) < 1e6  # it read the clock before each of its runs
    np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-12)
    assert alloc.objective == pytest.approx(ref_first, rel=1e-12)


@pytest.mark.parametrize("entities", [1, 3, 40])
@pytest.mark.parametrize("seed", range(6))
def test_path_with_heaps_matches_the_plain_loop(entities: int, seed: int) -> None:
    """path() keeps each entity's clock lazily and finds events in heaps; the plain loop
    below (every clock and every entity's margin checked at every event) gives the same
    events, freezing order and levels, with ties, near-ties within the margin, classes
    frozen from the start and starts above 0."""
    rng = np.random.default_rng(seed)
    n = 300
    maximum = rng.uniform(0.5, 3.0, n)
    maximum[rng.random(n) < 0.2] = 1.0  # exact ties
    maximum[:10] = 1.0 + rng.uniform(0, 5e-5, 10)  # within the margin of each other
    unit = rng.choice([0.5, 1.0, 2.0], n)
    live_weight = rng.choice([1.0, 2.0, 3.0], n)
    entity = rng.integers(0, entities, n)
    entity_weight = rng.uniform(0.5, 2.0, entities)
    frozen = rng.random(n) < 0.1
    start = np.where(rng.random(n) < 0.3, rng.uniform(0, 0.4, n), 0.0)
    args = (maximum, unit, live_weight, entity, entity_weight, frozen, start)
    got, ref = hp.path(*args), loop_path(*args)
    assert len(got.tau) == len(ref.tau)
    np.testing.assert_allclose(got.tau, ref.tau, rtol=1e-11, atol=1e-12)
    np.testing.assert_allclose(got.mu, ref.mu, rtol=1e-10, atol=1e-12)
    assert got.froze_at.tolist() == ref.froze_at.tolist()
    np.testing.assert_allclose(got.final, ref.final, rtol=1e-11, atol=1e-12)


def loop_path(
    maximum: np.ndarray,
    unit: np.ndarray,
    live_weight: np.ndarray,
    entity: np.ndarray,
    entity_weight: np.ndarray,
    frozen: np.ndarray,
    start: np.ndarray,
) -> hp.Path:
    """The path as it was first written: every entity's clock advanced and every
    entity's next class checked against the margin at every event."""
    n_ent = len(entity_weight)
    star = np.where(frozen, 0.0, (maximum - start) / np.where(unit > 0, unit, 1.0))  # mu at M
    froze_at = np.where(frozen, -1, np.iinfo(np.int64).max)
    final = np.where(frozen, start, maximum)
    # per entity: its unfrozen classes by mu*, a pointer to the next to freeze
    order = [np.nonzero((entity == e) & ~frozen)[0] for e in range(n_ent)]
    order = [o[np.argsort(star[o], kind="stable")] for o in order]
    star_l = [star[o].tolist() for o in order]
    max_l = [maximum[o].tolist() for o in order]
    unit_l = [unit[o].tolist() for o in order]
    start_l = [start[o].tolist() for o in order]
    lw_l = [live_weight[o].tolist() for o in order]
    nxt = [0] * n_ent
    left = [float(sum(w)) for w in lw_l]
    ew = [float(w) for w in entity_weight]
    mu = [0.0] * n_ent
    tau = 0.0
    taus: list[float] = []
    mus: list[list[float]] = []
    frz: list[tuple[int, int, float]] = []  # (class, event, level)
    while True:
        # each entity's next event: its next class reaches M (its clock at W_e / S_e)
        step, e_hit = np.inf, -1
        for e in range(n_ent):
            if nxt[e] < len(order[e]) and left[e] > 0:
                dt = (star_l[e][nxt[e]] - mu[e]) * left[e] / ew[e]
                if dt < step:
                    step, e_hit = dt, e
        if e_hit < 0:
            break
        step = max(step, 0.0)
        tau += step
        for e in range(n_ent):
            if left[e] > 0:
                mu[e] += step * ew[e] / left[e]
        mu[e_hit] = star_l[e_hit][nxt[e_hit]]  # exactly at the event
        k = len(taus)
        for e in range(n_ent):  # freeze every class that cannot rise by the margin
            i = nxt[e]
            while i < len(order[e]):
                lv = min(start_l[e][i] + unit_l[e][i] * mu[e], max_l[e][i])
                if max_l[e][i] - lv >= max(hp.MARGIN * lv, hp.MARGIN_FLOOR):
                    break
                frz.append((int(order[e][i]), k, lv))
                left[e] -= lw_l[e][i]
                i += 1
            nxt[e] = i
            if i == len(order[e]):
                left[e] = 0.0
        taus.append(tau)
        mus.append(list(mu))
    if frz:
        cls, ev, lv = (np.array(v) for v in zip(*frz, strict=True))
        froze_at[cls] = ev
        final[cls] = lv
    return hp.Path(
        np.array(taus),
        np.array(mus).reshape(len(taus), n_ent),
        froze_at,
        final,
        entity,
        unit,
        start,
    )
