"""min_cost by decomposition (cost_dw.py) against its class LP on small problems with no
two jobs alike: same steps per dollar (1e-9 relative) with and without SLOs, every SLO
met, feasible; SLOs that cannot all be met still raise naming the jobs (the class LP
decides); the decomposition really ran."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from answer_spy import spy_answers

from slurm_gavel.domain.model import Problem
from slurm_gavel.policies import PolicyOptions, allocate
from slurm_gavel.policies.min_cost import SloInfeasibleError
from slurm_gavel.policies.solvers import cost_dw
from slurm_gavel.simulate.synthetic import random_problem

PRICES = {"v100": 3.06, "p100": 1.46, "k80": 0.9}


def distinct(n: int, gpus: int, seed: int, slo_share: float, tight: float = 0.3) -> Problem:
    p = random_problem(n, gpus, seed=seed)
    rng = np.random.default_rng(seed + 11)
    jobs = []
    for j in p.jobs:
        row = {t: v * float(rng.uniform(0.8, 1.2)) for t, v in j.throughput.items()}
        j = dataclasses.replace(j, throughput=row)
        if rng.random() < slo_share and max(row.values()) > 0:
            # SLO: finish within 1/u of the time alone on the fastest type, u <= tight
            best = max(row.values())
            j = dataclasses.replace(
                j, slo=j.steps_remaining / (best * float(rng.uniform(0.02, tight)))
            )
        jobs.append(j)
    return dataclasses.replace(p, jobs=tuple(jobs), prices=PRICES)


def _run(monkeypatch: pytest.MonkeyPatch, p: Problem, decompose: bool, results=None):  # type: ignore[no-untyped-def]
    monkeypatch.setattr(cost_dw, "DW_MIN_JOBS", 1 if decompose else 10**12)
    target = "slurm_gavel.policies.min_cost.solve_decomposed"
    results = spy_answers(monkeypatch, target, cost_dw.solve_decomposed, results)
    try:
        return allocate(p, "min_cost", PolicyOptions()), results
    finally:
        monkeypatch.undo()


@pytest.mark.parametrize("seed,n,gpus,slo", [(0, 60, 8, 0.0), (1, 120, 16, 0.3), (2, 80, 30, 0.5)])
def test_matches_class_lp(monkeypatch: pytest.MonkeyPatch, seed, n, gpus, slo) -> None:  # type: ignore[no-untyped-def]
    p = distinct(n, gpus, seed, slo)
    ref, _ = _run(monkeypatch, p, decompose=False)
    got, ran = _run(monkeypatch, p, decompose=True)
    assert ran == [True]
    assert got.objective == pytest.approx(ref.objective, rel=1e-9)
    assert got.violations(p) == []
    for j in p.jobs:  # every SLO met
        if j.slo is not None and j.steps_remaining:
            rate = got.effective_throughput(p, j.id)
            assert rate >= j.steps_remaining / j.slo * (1 - 1e-8)


def test_unmeetable_slos_still_name_the_jobs(monkeypatch: pytest.MonkeyPatch) -> None:
    p = distinct(40, 2, 3, slo_share=0.9, tight=0.9)  # 6 GPUs, most jobs need most of one
    with pytest.raises(SloInfeasibleError) as ref:
        _run(monkeypatch, p, decompose=False)
    ran: list[bool] = []
    with pytest.raises(SloInfeasibleError) as got:
        _run(monkeypatch, p, decompose=True, results=ran)
    assert ran == [False]  # min_beta > 1: the class LP decides and names the jobs
    assert str(got.value) == str(ref.value)
