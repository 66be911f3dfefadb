"""The simulated cluster's rate model (backends/sim_rates.py): a job's steps/s on a
placement from the table, or from its own true row scaled by its type's slowdown."""

from __future__ import annotations

import pytest

from slurm_gavel.backends.sim_rates import RateModel
from slurm_gavel.domain.cluster_model import JobPlacement, NodeSlice
from slurm_gavel.domain.model import Job
from slurm_gavel.domain.throughputs import load_table

TABLE = load_table()
RESNET = "ResNet-50 (batch size 64)"
LM = "LM (batch size 5)"


def _at(job_id: str, gpus: int, *, consolidated: bool = True, partner: str | None = None):
    nodes = (NodeSlice("v100-000", gpus),)
    return JobPlacement(job_id, "v100", nodes, partner, consolidated)


def test_a_job_without_a_row_runs_at_the_tables_figure_for_its_placement():
    model = RateModel(TABLE, {})
    job = Job("a", RESNET, 2, total_steps=1.0)
    assert model.rate(job, _at("a", 2), None) == TABLE.throughput(RESNET, 2, "v100")
    spread = TABLE.throughput(RESNET, 2, "v100", consolidated=False)
    assert model.rate(job, _at("a", 2, consolidated=False), None) == spread
    one = Job("b", RESNET, 1, total_steps=1.0)
    shared = model.rate(one, _at("b", 1, partner="c"), Job("c", LM, 1, total_steps=1.0))
    assert shared == TABLE.pair(RESNET, LM, 1, "v100")[0]


def test_a_job_with_its_own_row_keeps_its_rate_and_takes_its_types_slowdowns():
    own = 2.5 * TABLE.throughput(RESNET, 2, "v100")
    model = RateModel(TABLE, {"a": {"v100": own}, "b": {"v100": 10.0}})
    job = Job("a", RESNET, 2, total_steps=1.0)
    assert model.rate(job, _at("a", 2), None) == own
    ratio = TABLE.throughput(RESNET, 2, "v100", consolidated=False) / TABLE.throughput(
        RESNET, 2, "v100"
    )
    assert model.rate(job, _at("a", 2, consolidated=False), None) == pytest.approx(own * ratio)
    # sharing: its own rate times the type's pair figure over its alone figure
    one = Job("b", RESNET, 1, total_steps=1.0)
    pair = TABLE.pair(RESNET, LM, 1, "v100")[0] / TABLE.throughput(RESNET, 1, "v100")
    shared = model.rate(one, _at("b", 1, partner="c"), Job("c", LM, 1, total_steps=1.0))
    assert shared == pytest.approx(10.0 * pair)
    # a partner that is not running: alone
    assert model.rate(one, _at("b", 1, partner="c"), None) == 10.0


def test_a_moldable_job_with_its_own_row_at_another_count():
    model = RateModel(TABLE, {"a": {"v100": 3.0}})
    job = Job("a", RESNET, 1, total_steps=1.0)
    # the type's rate at 4 over its rate at 1
    want = 3.0 * TABLE.throughput(RESNET, 4, "v100") / TABLE.throughput(RESNET, 1, "v100")
    assert model.rate(job, _at("a", 4), None) == pytest.approx(want)
    # linear where the table has no figure at that count
    assert model.rate(job, _at("a", 3), None) == pytest.approx(9.0)


def test_rates_are_memoised_per_placement_kind_not_across_kinds():
    model = RateModel(TABLE, {"a": {"v100": 4.0}})
    job = Job("a", RESNET, 2, total_steps=1.0)
    alone = model.rate(job, _at("a", 2), None)
    spread = model.rate(job, _at("a", 2, consolidated=False), None)
    assert alone != spread
    assert model.rate(job, _at("a", 2), None) == alone
