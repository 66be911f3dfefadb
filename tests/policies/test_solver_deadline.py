"""PolicyOptions.time_limit (the daemon's solver_time_limit_seconds) on the decomposition
paths (dw.py through mm_lp.py, ftf_dw.py and cost_dw.py), on mm_lp_single's reused
HiGHS instance, across the whole hierarchical water filling (hier_*.py) and the packed
group LP's hint (mm_pack_groups.py): no timed test; a limit of 0 or an injected clock
decides."""

from __future__ import annotations

import functools
import itertools

import highspy
import numpy as np
import pytest
from answer_spy import spy_answers

from slurm_gavel.domain.model import Problem
from slurm_gavel.errors import SolveError
from slurm_gavel.policies import PolicyOptions, allocate, min_cost
from slurm_gavel.policies import hierarchical_max_min_fairness as hmmf
from slurm_gavel.policies.solvers import (
    cost_dw,
    dw,
    ftf_dw,
    ftf_solver,
    hier_dw,
    hier_parametric,
    hier_water_filling,
    mm_lp,
    mm_lp_single,
    mm_pack_groups,
)
from slurm_gavel.policies.solvers.deadline import Deadline
from slurm_gavel.policies.solvers.lp import SolverError
from tests.policies.test_cost_dw import distinct as cost_distinct
from tests.policies.test_dw_decomposition import _problem
from tests.policies.test_ftf_dw import distinct
from tests.policies.test_hier_parametric import ONE_PLENTIFUL
from tests.policies.test_hier_parametric import distinct as hier_distinct
from tests.policies.test_mm_pack_groups import jittered


class Ticks:
    """A clock that advances `step` seconds per reading (from 0), or jumps when told."""

    def __init__(self, step: float = 1.0) -> None:
        self.step, self.now, self.readings = step, 0.0, 0

    def __call__(self) -> float:
        t = self.now
        self.now += self.step
        self.readings += 1
        return t


def _mm(time_limit: float | None, clock: Ticks | None = None, **kw) -> mm_lp.ClassSolution:  # type: ignore[no-untyped-def]
    coef, allowed, scale, count, capacity = _problem(3, n=60, gpus=16.0, zeros=0.15)
    extra = {} if clock is None else {"clock": clock}
    return mm_lp.solve_max_min_classes(
        coef, allowed, scale, count, capacity, decompose=True, time_limit=time_limit, **extra, **kw
    )


def test_deadline_without_limit_never_reads_the_clock() -> None:
    clock = Ticks()
    d = Deadline.after(None, "x", clock)
    assert d.remaining() is None and d.check() is None
    assert clock.readings == 0


def stretch_problem(monkeypatch: pytest.MonkeyPatch) -> Problem:
    """60 distinct jobs, the stretch decomposition on from 1 job."""
    monkeypatch.setattr(ftf_dw, "DW_MIN_JOBS", 1)
    return distinct(60, 8, 0)


def cost_problem(monkeypatch: pytest.MonkeyPatch) -> Problem:
    """80 distinct jobs, 30 % with an SLO, min_cost's decomposition on from 1 job."""
    monkeypatch.setattr(cost_dw, "DW_MIN_JOBS", 1)
    return cost_distinct(80, 16, 1, 0.3)


def _tiny_lp():  # type: ignore[no-untyped-def]
    h = dw._new_highs()
    h.addCols(2, np.array([1.0, 1.0]), np.zeros(2), np.ones(2), 0,
              np.zeros(0, np.int32), np.zeros(0, np.int32), np.zeros(0))  # fmt: skip
    h.addRows(1, np.array([1.0]), np.array([2.0]), 2, np.array([0], np.int32),
              np.array([0, 1], np.int32), np.array([1.0, 1.0]))  # fmt: skip
    return h


def test_highs_gets_what_is_left_on_top_of_its_earlier_runs() -> None:
    h = _tiny_lp()
    h.run()
    spent = h.getRunTime()
    Deadline(10.0, lambda: 7.5, 0.0, "x").arm(h)  # 2.5 s left
    assert h.getOptionValue("time_limit")[1] == pytest.approx(spent + 2.5, abs=1e-6)


def test_highs_stopping_at_the_limit_is_the_deadline_error() -> None:
    """1 ns left when HiGHS starts: it stops at its limit, and that is a SolverError
    naming the path, not a status for the caller to mistake for a stall."""
    with pytest.raises(SolverError, match=r"^path: the solver time limit of 1 s was reached"):
        Deadline(1.0, lambda: 1.0 - 1e-9, 0.0, "path").run(_tiny_lp())
    assert Deadline.after(None, "path").run(_tiny_lp()) == highspy.HighsModelStatus.kOptimal


def test_max_min_decomposition_stops_at_a_limit_of_zero() -> None:
    with pytest.raises(SolverError, match=r"max-min decomposition: the solver time limit of 0 s"):
        _mm(0.0)


def test_max_min_decomposition_reads_the_deadline_before_each_highs_run() -> None:
    """1 s per reading, 3.5 s: the start, three HiGHS runs (2.5, 1.5, 0.5 s left), then
    none left before the fourth."""
    clock = Ticks()
    with pytest.raises(SolverError, match=r"time limit of 3.5 s was reached"):
        _mm(3.5, clock)
    assert clock.readings == 5


def test_max_min_decomposition_within_its_limit_is_unchanged() -> None:
    ref = _mm(None)
    clock = Ticks()
    got = _mm(1e6, clock)
    assert clock.readings > 5  # it read the clock before each of its runs
    np.testing.assert_array_equal(got.x, ref.x)
    assert got.objective == ref.objective


def test_max_min_stage_two_past_the_limit_keeps_stage_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """As on the plain path: stage 2 is an improvement, stage 1's optimum stands."""
    clock = Ticks(step=0.0)
    real = mm_lp.max_value

    def late(*args, **kwargs):  # type: ignore[no-untyped-def]
        clock.now = 1e9  # stage 1 is done; the limit passes before stage 2's first run
        return real(*args, **kwargs)

    monkeypatch.setattr(mm_lp, "max_value", late)
    got = _mm(10.0, clock)
    stage1 = _mm(None, second_stage=False)
    both = _mm(None)
    np.testing.assert_array_equal(got.x, stage1.x)
    assert not np.array_equal(both.x, stage1.x)  # stage 2 would have changed x


def test_plain_lp_after_a_stall_gets_only_the_time_left(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = Ticks(step=0.0)

    def stalls(*args, **kwargs):  # type: ignore[no-untyped-def]
        clock.now += 4.0
        raise dw.DwStalled("other", "test: stalled")

    monkeypatch.setattr(mm_lp, "max_min", stalls)
    with pytest.raises(SolverError, match=r"max-min stage 1: HiGHS stopped with status 'Time lim"):
        _mm(3.0, clock)  # 4 s spent stalling: nothing left for the plain LP
    clock.now = 0.0
    got = _mm(30.0, clock)  # 26 s left: the plain LP's answer
    ref = mm_lp.solve_max_min_classes(
        *_problem(3, n=60, gpus=16.0, zeros=0.15), decompose=False, time_limit=None
    )
    np.testing.assert_array_equal(got.x, ref.x)


def test_max_sum_decomposition_honours_the_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    p = distinct(60, 16, 5)
    monkeypatch.setattr(mm_lp, "SUM_DW_MIN_COLUMNS", 1)
    calls = []
    real = mm_lp._sum_decomposed
    monkeypatch.setattr(
        mm_lp, "_sum_decomposed", lambda *a: calls.append(1) or real(*a)
    )  # the decomposition really runs
    with pytest.raises(SolveError, match=r"max-sum decomposition: the solver time limit of 0 s"):
        allocate(p, "max_sum_throughput", PolicyOptions(time_limit=0.0))
    ref = allocate(p, "max_sum_throughput", PolicyOptions())
    got = allocate(p, "max_sum_throughput", PolicyOptions(time_limit=1e6))
    assert got.objective == ref.objective and got.fractions == ref.fractions
    assert len(calls) == 3


@pytest.mark.parametrize("policy", ["finish_time_fairness", "min_total_duration"])
def test_stretch_decomposition_stops_at_a_limit_of_zero(
    monkeypatch: pytest.MonkeyPatch, policy: str
) -> None:
    p = stretch_problem(monkeypatch)
    with pytest.raises(SolveError, match=r"stretch decomposition: the solver time limit of 0 s"):
        allocate(p, policy, PolicyOptions(time_limit=0.0))


def test_stretch_decomposition_within_its_limit_is_unchanged(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    p = stretch_problem(monkeypatch)
    ref = allocate(p, "finish_time_fairness", PolicyOptions())
    clock = Ticks()
    timed = functools.partial(ftf_solver.minimise_stretch, clock=clock)
    monkeypatch.setattr(ftf_solver, "minimise_stretch", timed)
    got = allocate(p, "finish_time_fairness", PolicyOptions(time_limit=1e6))
    assert clock.readings > 5
    assert got.objective == ref.objective and got.fractions == ref.fractions
    clock.now, clock.readings = 0.0, 0
    with pytest.raises(SolveError, match=r"stretch decomposition: the solver time limit of 3.5 s"):
        allocate(p, "finish_time_fairness", PolicyOptions(time_limit=3.5))
    assert clock.readings == 5


def test_class_lp_after_a_stretch_stall_gets_only_the_time_left(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    p = stretch_problem(monkeypatch)
    clock = Ticks(step=0.0)

    def stalls(self, w, dw_):  # type: ignore[no-untyped-def]
        clock.now += 4.0
        raise dw.DwStalled("other", "test: stalled")

    monkeypatch.setattr(ftf_dw.DwStretch, "solve", stalls)
    monkeypatch.setattr(
        ftf_solver, "minimise_stretch", functools.partial(ftf_solver.minimise_stretch, clock=clock)
    )
    with pytest.raises(SolveError, match=r"stretch LP: HiGHS stopped with status 'Time limit"):
        allocate(p, "finish_time_fairness", PolicyOptions(time_limit=3.0))
    clock.now = 0.0
    monkeypatch.setattr(ftf_dw, "DW_MIN_JOBS", 10**9)
    ref = allocate(p, "finish_time_fairness", PolicyOptions())
    monkeypatch.setattr(ftf_dw, "DW_MIN_JOBS", 1)
    got = allocate(p, "finish_time_fairness", PolicyOptions(time_limit=30.0))  # 26 s left
    assert got.objective == ref.objective


def test_reused_highs_instance_gives_each_solve_the_whole_limit() -> None:
    """mm_lp_single reuses one HiGHS instance per thread, and HiGHS's time limit counts
    every run of an instance: a limit handed over as is failed every solve once the
    thread's earlier solves had added up to it (a daemon with
    solver_time_limit_seconds: 30 after 30 s of max-min solves in all)."""
    rng = np.random.default_rng(0)
    n, k = 20, 3
    coef = rng.uniform(0.5, 2.0, (n, k))
    args = (coef, np.ones((n, k), bool), np.ones(n), np.ones(n), np.full(k, 6.0))
    h = mm_lp_single._highs()
    for _ in itertools.repeat(None, 100_000):  # no limit: these always succeed
        if h.getRunTime() > 0.05:
            break
        mm_lp_single.solve_single_classes(*args, second_stage=True, time_limit=None, slack=1e-9)
    assert h.getRunTime() > 0.05
    # ~1 ms a solve: far within 0.05 s of its own
    x, _ = mm_lp_single.solve_single_classes(*args, second_stage=True, time_limit=0.05, slack=1e-9)
    assert (x.sum(axis=1) > 0).all()


def test_min_cost_decomposition_honours_the_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    """min_cost at per-job scale (cost_dw.py): limit 0 stops it; SLOs, so both its
    min_beta and its max_value run; a limit never reached changes nothing."""
    p = cost_problem(monkeypatch)
    with pytest.raises(SolveError, match=r"min_cost decomposition: the solver time limit of 0 s"):
        allocate(p, "min_cost", PolicyOptions(time_limit=0.0))
    ref = allocate(p, "min_cost", PolicyOptions())
    clock = Ticks()
    monkeypatch.setattr(min_cost, "_fast", functools.partial(min_cost._fast, clock=clock))
    got = allocate(p, "min_cost", PolicyOptions(time_limit=1e6))
    assert clock.readings > 5
    assert got.objective == ref.objective and got.fractions == ref.fractions


def test_min_cost_class_lp_after_the_decomposition_gets_only_the_time_left(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The decomposition declines (SLOs it cannot meet together, or a stall): the class
    LP runs in what is left of the limit."""
    p = cost_problem(monkeypatch)
    clock = Ticks(step=0.0)

    def declines(*args):  # type: ignore[no-untyped-def]
        clock.now += 4.0
        return None

    monkeypatch.setattr(min_cost, "solve_decomposed", declines)
    monkeypatch.setattr(min_cost, "_fast", functools.partial(min_cost._fast, clock=clock))
    with pytest.raises(SolveError, match=r"min_cost: HiGHS stopped with status 'Time limit"):
        allocate(p, "min_cost", PolicyOptions(time_limit=3.0))
    clock.now = 0.0
    got = allocate(p, "min_cost", PolicyOptions(time_limit=30.0))  # 26 s left
    monkeypatch.setattr(cost_dw, "DW_MIN_JOBS", 10**12)
    assert got.objective == allocate(p, "min_cost", PolicyOptions()).objective


# hierarchical_max_min_fairness: one deadline for the whole water filling (the path's
# decomposition, hier_dw's first level, the LP loop's two HiGHS instances).


def _hier(monkeypatch: pytest.MonkeyPatch, clock: Ticks, *, path: bool, dw_first: bool) -> None:
    monkeypatch.setattr(hier_parametric, "DW_MIN_CELLS", 1 if path else 10**12)
    monkeypatch.setattr(hier_dw, "DW_MIN_CELLS", 1 if dw_first else 10**12)
    monkeypatch.setattr(
        hmmf, "water_fill", functools.partial(hier_water_filling.water_fill, clock=clock)
    )


def test_hier_lp_loop_after_the_path_gets_only_the_time_left(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The path hands over to the LP loop (after one crossing of the two this cluster
    needs): 4 s spent on the path leave nothing of 3 s for the loop (it used to get 3 s
    of its own), 26 s of 30 s give the unlimited answer."""
    p = hier_distinct(80, ONE_PLENTIFUL, 0)
    clock = Ticks(step=0.0)
    _hier(monkeypatch, clock, path=True, dw_first=False)
    monkeypatch.setattr(hier_parametric, "MAX_ROUNDS", 1)
    real = hier_water_filling.parametric_fill

    def slow(*args, **kwargs):  # type: ignore[no-untyped-def]
        out = real(*args, **kwargs)
        assert out is not None and not out.complete  # the hand-over case
        clock.now += 4.0
        return out

    monkeypatch.setattr(hier_water_filling, "parametric_fill", slow)
    with pytest.raises(
        SolveError, match=r"hierarchical water filling: the solver time limit of 3 s"
    ):
        allocate(p, "hierarchical_max_min_fairness", PolicyOptions(time_limit=3.0))
    clock.now = 0.0
    got = allocate(p, "hierarchical_max_min_fairness", PolicyOptions(time_limit=30.0))
    ref = allocate(p, "hierarchical_max_min_fairness", PolicyOptions())
    assert got.fractions == ref.fractions and got.objective == ref.objective


def test_hier_every_highs_run_reads_the_one_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    """A limit never reached: every HiGHS run of the solve (min_beta's in the path, the
    LP loop's after the hand-over) reads the water filling's deadline, and nothing
    else does; the allocation is the unlimited one."""
    p = hier_distinct(80, ONE_PLENTIFUL, 0)
    clock = Ticks()
    _hier(monkeypatch, clock, path=True, dw_first=False)
    monkeypatch.setattr(hier_parametric, "MAX_ROUNDS", 1)  # the hand-over to the loop
    runs: list[str] = []
    real_run, real_loop_run = Deadline.run, hier_water_filling._run
    monkeypatch.setattr(
        Deadline, "run", lambda self, h: runs.append(self.what) or real_run(self, h)
    )
    loop_runs: list[int] = []

    def loop_run(h, what, deadline):  # type: ignore[no-untyped-def]
        loop_runs.append(1)
        return real_loop_run(h, what, deadline)

    monkeypatch.setattr(hier_water_filling, "_run", loop_run)
    got = allocate(p, "hierarchical_max_min_fairness", PolicyOptions(time_limit=1e6))
    assert set(runs) == {"hierarchical water filling"}
    assert clock.readings == 1 + len(runs)  # the start, then one before each run
    assert 0 < len(loop_runs) < len(runs)  # the path's runs and the loop's
    runs.clear()
    ref = allocate(p, "hierarchical_max_min_fairness", PolicyOptions())
    assert got.fractions == ref.fractions and got.objective == ref.objective


def test_hier_first_level_decomposition_stops_at_the_limit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """hier_dw's first level (dw.max_min) within the deadline: 3.5 s at 1 s per reading
    stop it at its 4th HiGHS run (it used to run with no limit, and the level LP after
    it with the whole limit again); within a limit never reached, the same answer."""
    p = hier_distinct(80, ONE_PLENTIFUL, 0)
    clock = Ticks()
    _hier(monkeypatch, clock, path=False, dw_first=True)
    target = "slurm_gavel.policies.solvers.hier_water_filling.first_level_dw"
    calls = spy_answers(monkeypatch, target, hier_water_filling.first_level_dw)
    with pytest.raises(
        SolveError, match=r"hierarchical water filling: the solver time limit of 3.5"
    ):
        allocate(p, "hierarchical_max_min_fairness", PolicyOptions(time_limit=3.5))
    assert clock.readings == 5 and calls == []  # it stopped inside the decomposition
    got = allocate(p, "hierarchical_max_min_fairness", PolicyOptions(time_limit=1e6))
    assert calls == [True]  # the decomposition gave the first level
    ref = allocate(p, "hierarchical_max_min_fairness", PolicyOptions())
    assert got.fractions == ref.fractions and got.objective == ref.objective


# max_min_fairness_packed on the partner-group LP: the hint's LP within the same limit.


def _packed(monkeypatch: pytest.MonkeyPatch, clock: Ticks) -> tuple[Problem, list[float | None]]:
    """jittered problem on the group LP; the hint's solve records its limit and takes 4 s."""
    monkeypatch.setattr(mm_pack_groups, "GROUP_MIN_CLASSES", 0)
    monkeypatch.setattr(
        mm_pack_groups,
        "solve_packed_groups",
        functools.partial(mm_pack_groups.solve_packed_groups, clock=clock),
    )
    limits: list[float | None] = []
    real = mm_lp.solve_max_min_classes

    def hint(*args, **kwargs):  # type: ignore[no-untyped-def]
        limits.append(kwargs.get("time_limit"))
        clock.now += 4.0
        return real(*args, **kwargs)

    monkeypatch.setattr(mm_lp, "solve_max_min_classes", hint)
    return jittered(30, 4, 4), limits


def test_packed_hint_runs_within_the_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    """0 s: nothing runs, the hint neither; 3 s: the hint gets 3 s and its 4 s leave
    nothing for the main LP (it used to run unlimited and the main LP got 3 s of its
    own); 30 s: the hint gets 30 s, the main LP 26 s, the unlimited answer."""
    clock = Ticks(step=0.0)
    p, limits = _packed(monkeypatch, clock)
    with pytest.raises(SolveError, match=r"packed max-min: the solver time limit of 0 s"):
        allocate(p, "max_min_fairness_packed", PolicyOptions(time_limit=0.0))
    assert limits == []
    with pytest.raises(SolveError, match=r"packed max-min: the solver time limit of 3 s"):
        allocate(p, "max_min_fairness_packed", PolicyOptions(time_limit=3.0))
    assert limits == [3.0]
    main: list[float | None] = []
    real_lp = mm_pack_groups.PricedLp

    def priced(*args, **kwargs):  # type: ignore[no-untyped-def]
        main.append(kwargs.get("time_limit"))
        return real_lp(*args, **kwargs)

    monkeypatch.setattr(mm_pack_groups, "PricedLp", priced)
    clock.now = 0.0
    got = allocate(p, "max_min_fairness_packed", PolicyOptions(time_limit=30.0))
    assert limits[1:] == [30.0] and main == [26.0]
    ref = allocate(p, "max_min_fairness_packed", PolicyOptions())
    assert got.fractions == ref.fractions and got.objective == ref.objective


def test_packed_hint_stopped_at_the_limit_is_the_deadline_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """HiGHS stopping the hint's LP at the limit: the deadline's error (the path, the
    limit and the fix), not the hint LP's status; another failure of the hint as is."""
    clock = Ticks(step=0.0)
    p, _ = _packed(monkeypatch, clock)

    def stops(*args, **kwargs):  # type: ignore[no-untyped-def]
        clock.now = 5.0
        raise SolverError("max-min stage 1: HiGHS stopped with status 'Time limit reached'")

    monkeypatch.setattr(mm_lp, "solve_max_min_classes", stops)
    with pytest.raises(SolveError, match=r"packed max-min: the solver time limit of 5 s.*raise"):
        allocate(p, "max_min_fairness_packed", PolicyOptions(time_limit=5.0))
    clock.now = 0.0
    with pytest.raises(SolveError, match=r"^max-min stage 1: HiGHS stopped"):
        allocate(p, "max_min_fairness_packed", PolicyOptions(time_limit=50.0))
