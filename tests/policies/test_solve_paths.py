"""Which path a policy's LPs took (policies/solvers/solve_paths.py), as
policies.allocate records it on the Allocation: the decomposition with its certificate
met, or the plain LP after a fallback, with the reason, and a log line for each."""

from __future__ import annotations

import dataclasses
import logging

import pytest
from distinct_rows import jitter_rows

from slurm_gavel.domain.model import Problem
from slurm_gavel.policies import PolicyOptions, allocate
from slurm_gavel.policies.min_cost import SloInfeasibleError
from slurm_gavel.policies.solvers import cost_dw, dw, ftf_dw, mm_lp, solve_paths
from slurm_gavel.simulate.synthetic import random_problem

LOGGER = "slurm_gavel.policies.solvers.solve_paths"


def distinct(n: int, seed: int = 0, **extra: object) -> Problem:
    """n jobs with rows all different (every throughput jittered by up to 20%)."""
    return jitter_rows(random_problem(n, max(n // 4, 4), seed=seed), seed + 1, **extra)


# policy, the threshold that sends its LP to the decomposition, the LP's name
FORCED = [
    ("max_min_fairness", mm_lp, "DW_MIN_COLUMNS", "max_min"),
    ("max_sum_throughput", mm_lp, "SUM_DW_MIN_COLUMNS", "max_sum"),
    ("finish_time_fairness", ftf_dw, "DW_MIN_JOBS", "stretch"),
    ("min_cost", cost_dw, "DW_MIN_JOBS", "min_cost"),
]
PRICES = {"v100": 3.06, "p100": 1.46, "k80": 0.9}


def _problem(policy: str) -> Problem:
    return distinct(80, prices=PRICES) if policy == "min_cost" else distinct(80)


def _wrong_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every Lagrangian bound scaled: past the primal value of min problems (an invalid
    bound), too weak for max problems (the negated value): no certificate holds."""
    real = dw._bound
    monkeypatch.setattr(dw, "_bound", lambda *args: real(*args) * (1 + 1e-6))


@pytest.mark.parametrize("policy,module,threshold,lp", FORCED)
def test_a_certified_decomposition_is_recorded(monkeypatch, policy, module, threshold, lp):  # type: ignore[no-untyped-def]
    monkeypatch.setattr(module, threshold, 1)
    alloc = allocate(_problem(policy), policy, PolicyOptions())
    assert alloc.decomposed == [lp]
    assert alloc.fallbacks == []


@pytest.mark.parametrize("policy,module,threshold,lp", FORCED)
def test_a_fallback_is_recorded_and_logged_and_the_answer_is_the_plain_lps(  # type: ignore[no-untyped-def]
    monkeypatch, caplog, policy, module, threshold, lp
):
    problem = _problem(policy)
    plain = allocate(problem, policy, PolicyOptions())  # below every threshold: plain LP
    assert plain.decomposed == [] and plain.fallbacks == []
    monkeypatch.setattr(module, threshold, 1)
    _wrong_bound(monkeypatch)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        alloc = allocate(problem, policy, PolicyOptions())
    assert alloc.decomposed == []
    assert [f.lp for f in alloc.fallbacks] == [lp]
    reason = alloc.fallbacks[0].reason
    assert reason in ("bound_crosses_primal", "gap_open")
    assert alloc.fallbacks[0].detail  # the numbers, for the log and the benchmark
    logged = [r for r in caplog.records if r.name == LOGGER]
    assert len(logged) == 1 and logged[0].levelno == logging.WARNING
    assert f"{lp} LP" in logged[0].getMessage() and reason in logged[0].getMessage()
    # the plain LP ran: the same allocation as below the threshold
    assert alloc.fractions == plain.fractions


def test_unmeetable_slos_are_an_expected_fallback(monkeypatch, caplog) -> None:  # type: ignore[no-untyped-def]
    """min_cost with SLOs no allocation meets: the decomposition hands the LP over on
    purpose (the class LP names the jobs short, and the policy refuses), logged at
    INFO, not as a warning."""
    problem = distinct(40, prices=PRICES)
    # 30 of the 40 jobs on 10 GPUs of each type need 90% of their best type's time:
    # each alone could, all together cannot
    jobs = tuple(
        dataclasses.replace(j, steps_remaining=900.0 * max(j.throughput.values()), slo=1000.0)
        if i < 30
        else j
        for i, j in enumerate(problem.jobs)
    )
    problem = dataclasses.replace(problem, jobs=jobs)
    monkeypatch.setattr(cost_dw, "DW_MIN_JOBS", 1)
    with caplog.at_level(logging.INFO, logger=LOGGER), pytest.raises(SloInfeasibleError):
        allocate(problem, "min_cost", PolicyOptions())
    logged = [r for r in caplog.records if r.name == LOGGER]
    assert [r.levelno for r in logged] == [logging.INFO]
    assert "min_cost LP" in logged[0].getMessage() and "slos_unmet" in logged[0].getMessage()


def test_outside_a_recording_a_fallback_is_only_logged(caplog) -> None:  # type: ignore[no-untyped-def]
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        solve_paths.fell_back("max_min", "gap_open", "apart by 1e-6")
        solve_paths.decomposed("max_min")
    assert "max_min LP" in caplog.text and "gap_open" in caplog.text
    with solve_paths.recording() as outer:
        with solve_paths.recording() as inner:
            solve_paths.decomposed("stretch")
        solve_paths.fell_back("max_sum", "gap_open", "d")
    assert inner.decomposed == ["stretch"] and inner.fallbacks == []
    assert outer.decomposed == [] and [f.lp for f in outer.fallbacks] == ["max_sum"]
