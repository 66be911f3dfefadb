"""min_cost: steps-per-dollar optimum by hand, SLOs met, fast == reference, infeasible SLOs
and missing prices give errors that name the jobs / type."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from policy_strategies import against_reference, against_solvers, clusters, templated_jobs

from slurm_gavel.domain.model import Problem, ProblemJob
from slurm_gavel.errors import InputError, SolveError
from slurm_gavel.policies import PolicyOptions, allocate

REF = PolicyOptions(reference=True)
PRICES = {"v": 4.0, "k": 0.5}


def job(i, tput, steps=100.0, slo=None, sf=1) -> ProblemJob:
    return ProblemJob(str(i), "t", tput, sf, 1.0, steps_remaining=steps, slo=slo)


def test_without_slo_the_job_takes_the_most_steps_per_dollar():
    # v: 4 steps/s at $4/h -> 3600 steps/$; k: 1 step/s at $0.5/h -> 7200 steps/$.
    p = Problem({"v": 1, "k": 1}, (job(0, {"v": 4.0, "k": 1.0}),), prices=PRICES)
    for opts in (PolicyOptions(), REF):
        a = allocate(p, "min_cost", opts)
        assert a.fractions["0"] == pytest.approx({"v": 0.0, "k": 1.0})
        assert a.objective == pytest.approx(7200.0)


def test_slo_forces_time_on_the_expensive_fast_type():
    # Needs 250 steps in 100 s = 2.5 steps/s: 4 x_v + x_k >= 2.5 with x_v + x_k <= 1:
    # x_v = 0.5, x_k = 0.5; objective 0.5 * 3600 + 0.5 * 7200 = 5400.
    p = Problem(
        {"v": 1, "k": 1}, (job(0, {"v": 4.0, "k": 1.0}, steps=250, slo=100),), prices=PRICES
    )
    for opts in (PolicyOptions(), REF):
        a = allocate(p, "min_cost", opts)
        assert a.fractions["0"]["v"] == pytest.approx(0.5, rel=1e-7)
        assert a.fractions["0"]["k"] == pytest.approx(0.5, rel=1e-7)
        assert a.objective == pytest.approx(5400.0, rel=1e-9)


def test_scale_factor_multiplies_the_price():
    # 2-GPU job: k costs 2 * 0.5 = $1/h for 1 step/s -> 3600 steps/$ (ties with a
    # 1-GPU v100 job above); v costs $8/h for 4 steps/s -> 1800 steps/$: it takes k.
    p = Problem({"v": 2, "k": 2}, (job(0, {"v": 4.0, "k": 1.0}, sf=2),), prices=PRICES)
    a = allocate(p, "min_cost")
    assert a.fractions["0"] == pytest.approx({"v": 0.0, "k": 1.0})
    assert a.objective == pytest.approx(3600.0)


def test_several_slo_jobs_of_one_class_each_meet_their_slo():
    # Five identical jobs with different SLOs share 2 v and 2 k GPUs.
    jobs = tuple(
        job(i, {"v": 4.0, "k": 1.0}, steps=1000, slo=s)
        for i, s in enumerate([300.0, 400.0, 800.0, None, 2000.0])
    )
    p = Problem({"v": 2, "k": 2}, jobs, prices=PRICES)
    fast, _ = against_reference(p, "min_cost", rel=1e-7)
    assert not fast.violations(p)
    for j in p.jobs:
        if j.slo:
            assert fast.effective_throughput(p, j.id) >= j.steps_remaining / j.slo * (1 - 1e-7)


def test_slo_impossible_even_alone_names_the_job():
    p = Problem(
        {"v": 1, "k": 1},
        (job(0, {"v": 4.0, "k": 1.0}), job(1, {"v": 4.0, "k": 1.0}, steps=500, slo=100)),
        prices=PRICES,
    )
    with pytest.raises(SolveError, match=r"1 \(needs 5 steps/s, at most 4 alone\)"):
        allocate(p, "min_cost")


def test_passed_slo_names_the_job():
    p = Problem({"v": 1, "k": 1}, (job("late", {"v": 4.0}, slo=-5.0),), prices=PRICES)
    with pytest.raises(SolveError, match=r"late \(SLO already passed\)"):
        allocate(p, "min_cost")


def test_slos_that_cannot_all_be_met_together_name_the_short_jobs():
    # Each needs 3 steps/s = 0.75 of the only v GPU (k is too slow for either).
    p = Problem(
        {"v": 1, "k": 1},
        (
            job("a", {"v": 4.0, "k": 1.0}, steps=300, slo=100),
            job("b", {"v": 4.0, "k": 1.0}, steps=300, slo=100),
            job("c", {"v": 4.0, "k": 1.0}),
        ),
        prices=PRICES,
    )
    with pytest.raises(SolveError, match="cannot all be met together") as err:
        allocate(p, "min_cost")
    msg = str(err.value)
    assert ("a (" in msg) or ("b (" in msg)
    assert "c (" not in msg  # no SLO, never blamed


def test_missing_price_names_the_type_and_the_fix():
    p = Problem({"v": 1, "k": 1}, (job(0, {"v": 4.0, "k": 1.0}),), prices={"v": 4.0})
    with pytest.raises(InputError, match=r"GPU type 'k' has no price; add \"prices\""):
        allocate(p, "min_cost")


def test_no_price_needed_for_a_type_with_no_gpus():
    p = Problem({"v": 1, "k": 0}, (job(0, {"v": 4.0, "k": 1.0}),), prices={"v": 4.0})
    assert allocate(p, "min_cost").fractions["0"]["v"] == pytest.approx(1.0)


@st.composite
def problems(draw: st.DrawFn) -> Problem:
    cluster = draw(clusters(min_gpus=1))
    prices = {t: draw(st.sampled_from([0.5, 1.0, 3.0])) for t in cluster}
    jobs = []
    drawn = draw(templated_jobs(list(cluster), scales=(1, 1, 2), min_first_speed=0.5))
    for i, (row, sf) in enumerate(drawn):
        # SLOs loose enough to be usually (not always) feasible together.
        slack = draw(st.sampled_from([None, None, 4.0, 10.0, 40.0]))
        best = max((v for t, v in row.items() if sf <= cluster[t]), default=0.0)
        slo = None if slack is None or best == 0 else 100.0 * slack / best
        jobs.append(ProblemJob(str(i), "t", row, sf, 1.0, steps_remaining=100.0, slo=slo))
    return Problem(cluster, tuple(jobs), prices=prices)


@against_solvers(40)
@given(problems())
def test_property_fast_equals_reference_or_both_refuse(p):
    try:
        ref = allocate(p, "min_cost", REF)
    except SolveError:
        with pytest.raises(SolveError):
            allocate(p, "min_cost")
        return
    fast = allocate(p, "min_cost")
    assert fast.violations(p) == []
    assert fast.objective == pytest.approx(ref.objective, rel=1e-6)
    for j in p.jobs:
        if j.slo:
            assert fast.effective_throughput(p, j.id) >= j.steps_remaining / j.slo * (1 - 1e-6)
