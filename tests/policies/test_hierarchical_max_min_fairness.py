"""hierarchical_max_min_fairness: entity weights, water filling, notes, fast == per-job
reference, agreement with plain max-min for one entity, and no silent fallback."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from policy_strategies import against_solvers, clusters, templated_jobs

from slurm_gavel.domain.model import Allocation, Problem, ProblemJob
from slurm_gavel.errors import SolveError
from slurm_gavel.policies import PolicyOptions, allocate
from slurm_gavel.policies.solvers import hier_water_filling
from slurm_gavel.simulate.synthetic import random_problem

NAME = "hierarchical_max_min_fairness"
REF = PolicyOptions(reference=True)


def job(i, tput, account=None, w=1.0, sf=1) -> ProblemJob:
    return ProblemJob(str(i), "t", tput, sf, w, account=account)


def normalised(p: Problem, a: Allocation) -> dict[str, float]:
    cap = sum(p.cluster.values())
    out = {}
    for j in p.jobs:
        share = sum(j.throughput.get(t, 0.0) * c for t, c in p.cluster.items()) / cap
        out[j.id] = a.effective_throughput(p, j.id) / share if share > 0 else 0.0
    return out


def test_two_accounts_two_to_one_when_nobody_is_bottlenecked():
    p = Problem(
        {"v": 3},
        (job(0, {"v": 2.0}, "a"), job(1, {"v": 2.0}, "b"), job(2, {"v": 2.0}, "a")),
        accounts={"a": 2.0, "b": 1.0},
    )
    for opts in (PolicyOptions(), REF):
        v = normalised(p, allocate(p, NAME, opts))
        # Entity a's jobs together get twice entity b's normalised throughput.
        assert v["0"] + v["2"] == pytest.approx(2 * v["1"], rel=1e-7)
        assert v["0"] + v["2"] + v["1"] == pytest.approx(3.0, rel=1e-7)  # all 3 GPUs used


def test_entity_shares_count_gpus_of_multi_gpu_jobs():
    # Gavel's level is s_j * value_j / w'_j: an entity's share is in GPU-normalised
    # units, so a 2-GPU job counts its value twice. 2 GPUs: levels c, c/2 (s = 2), c.
    p = Problem(
        {"v": 2},
        (job(0, {"v": 2.0}, "a"), job(1, {"v": 2.0}, "b"), job(2, {"v": 2.0}, "a", sf=2)),
        accounts={"a": 2.0, "b": 1.0},
    )
    v = normalised(p, allocate(p, NAME))
    assert v["0"] + 2 * v["2"] == pytest.approx(2 * v["1"], rel=1e-7)
    assert v["1"] == pytest.approx(2 / 3, rel=1e-7)


def test_bottlenecked_job_leftover_goes_to_the_others():
    # 2 GPUs. Account a (weight 3) has one 1-GPU job; b (weight 1) three. a's share
    # would be 1.5 GPUs but its job can use 1: frozen at 1, the rest (1 GPU) goes to
    # b's jobs, 1/3 each. A single max-min pass would leave b's jobs at 1/9 each.
    jobs = (job(0, {"v": 1.0}, "a"), *(job(i, {"v": 1.0}, "b") for i in (1, 2, 3)))
    p = Problem({"v": 2}, jobs, accounts={"a": 3.0, "b": 1.0})
    for opts in (PolicyOptions(), REF):
        a = allocate(p, NAME, opts)
        assert a.fractions["0"]["v"] == pytest.approx(1.0, rel=1e-7)
        for i in "123":
            assert a.fractions[i]["v"] == pytest.approx(1 / 3, rel=1e-6)
        assert a.objective == pytest.approx(1 / 3, rel=1e-7)  # first level: 3c = 1


def test_job_weights_split_an_entity_share():
    p = Problem(
        {"v": 1},
        (job(0, {"v": 1.0}, "a", w=1.0), job(1, {"v": 1.0}, "a", w=3.0), job(2, {"v": 1.0}, "b")),
        accounts={"a": 1.0, "b": 1.0},
    )
    a = allocate(p, NAME)
    assert a.fractions["2"]["v"] == pytest.approx(0.5, rel=1e-7)
    assert a.fractions["0"]["v"] == pytest.approx(0.125, rel=1e-7)
    assert a.fractions["1"]["v"] == pytest.approx(0.375, rel=1e-7)


def test_accounts_without_weight_get_one_and_a_note():
    p = Problem(
        {"v": 2},
        (job(0, {"v": 1.0}, "a"), job(1, {"v": 1.0}, "x"), job(2, {"v": 1.0}), job(3, {"v": 1.0})),
        accounts={"a": 1.0},
    )
    a = allocate(p, NAME)
    assert any("x, (none)" in n and "weight 1.0" in n for n in a.notes)
    # three entities of weight 1 over 2 GPUs: a and x get 2/3, (none)'s two jobs 1/3 each
    assert a.fractions["0"]["v"] == pytest.approx(2 / 3, rel=1e-7)
    assert a.fractions["2"]["v"] == pytest.approx(1 / 3, rel=1e-7)


def test_one_entity_first_level_matches_plain_max_min():
    # With one entity, w'_j = w_j / sum(w), so the first level is sum(w) times the
    # max-min fairness objective (computed by the max_min_fairness policy's own LP).
    p = random_problem(30, 6, seed=5, weights=(1.0, 2.0))
    h = allocate(p, NAME)
    mm = allocate(p, "max_min_fairness")
    total_w = sum(j.priority_weight for j in p.jobs)
    assert h.objective / total_w == pytest.approx(mm.objective, rel=1e-6)


@pytest.mark.parametrize("seed", range(3))
def test_fast_equals_reference(seed):
    p = random_problem(12, 3, seed=seed, accounts={"a": 2.0, "b": 1.0, "c": 0.5}, weights=(1, 2))
    fast = allocate(p, NAME)
    ref = allocate(p, NAME, REF)
    vf, vr = normalised(p, fast), normalised(p, ref)
    for k in vf:
        assert vf[k] == pytest.approx(vr[k], rel=1e-5, abs=1e-7)
    assert fast.objective == pytest.approx(ref.objective, rel=1e-7)
    assert not fast.violations(p)


def test_solver_failure_raises_instead_of_degrading(monkeypatch):
    p = Problem({"v": 2}, (job(0, {"v": 1.0}, "a"), job(1, {"v": 1.0}, "b")))

    def time_limit_reached(h, what, deadline):
        # HiGHS stops at once: status "Time limit reached". Without presolve: highspy
        # 1.16's presolve solves this small LP whole before it looks at the time limit.
        h.setOptionValue("presolve", "off")
        h.setOptionValue("time_limit", 0.0)
        raise_if_not_optimal(h, what, deadline)

    raise_if_not_optimal = hier_water_filling._run
    monkeypatch.setattr(hier_water_filling, "_run", time_limit_reached)
    with pytest.raises(SolveError, match=r"level LP failed.*Time limit.*no allocation returned"):
        allocate(p, NAME)


def test_no_bottleneck_found_raises_instead_of_degrading(monkeypatch):
    # Force the bottleneck search to find nothing and the duals to prove nothing:
    # the water filling must stop with an error, not return a max-min answer.
    p = Problem({"v": 1}, (job(0, {"v": 1.0}, "a"), job(1, {"v": 1.0}, "b")))
    monkeypatch.setattr(hier_water_filling, "DUAL_TOL", np.inf)
    monkeypatch.setattr(
        hier_water_filling, "find_bottlenecked", lambda lp, level, cand: np.zeros_like(cand)
    )
    with pytest.raises(SolveError, match="made no progress"):
        allocate(p, NAME)


@st.composite
def problems(draw: st.DrawFn) -> Problem:
    cluster = draw(clusters(max_gpus=5))
    drawn = draw(templated_jobs(list(cluster), speeds=(0.0, 0.5, 1.0, 2.0, 3.0), max_jobs=6))
    jobs = tuple(
        ProblemJob(
            str(i),
            "t",
            row,
            sf,
            draw(st.sampled_from([1.0, 2.0])),
            account=draw(st.sampled_from(["a", "b", None])),
        )
        for i, (row, sf) in enumerate(drawn)
    )
    return Problem(cluster, jobs, accounts={"a": draw(st.sampled_from([1.0, 3.0])), "b": 1.0})


@against_solvers(25)
@given(problems())
def test_property_feasible_and_equal_to_reference(p):
    fast = allocate(p, NAME)
    assert fast.violations(p) == []
    ref = allocate(p, NAME, REF)
    vf, vr = normalised(p, fast), normalised(p, ref)
    for k in vf:
        assert vf[k] == pytest.approx(vr[k], rel=1e-5, abs=1e-6)
