"""Each job's own throughput row (core/learned_rows/job_rows.py): prior, measurements,
marks, knowledge."""

from __future__ import annotations

import math

import pytest

from slurm_gavel.core.cluster_rows import ESTIMATED, TYPE_BLIND, cluster_rows
from slurm_gavel.core.learned_rows.estimate_jobs import estimate_job_rows
from slurm_gavel.core.learned_rows.job_rows import (
    GIVEN,
    MEASURED,
    PRIOR,
    JobRows,
    Knowledge,
    RowSource,
    record_measurements,
)
from slurm_gavel.core.scheduler_state import JobAccount
from slurm_gavel.domain.cluster_model import JobPlacement, JobState, NodeSlice, ObservedJob
from slurm_gavel.domain.model import Job
from slurm_gavel.domain.throughputs import load_table
from slurm_gavel.errors import InputError

TABLE = load_table()
TYPES = ("v100", "p100", "k80")
RESNET = "ResNet-50 (batch size 64)"


def _running(job: Job, gpu: str, rate: float | None, partner: str | None = None) -> ObservedJob:
    nodes = (NodeSlice(f"{gpu}-0", job.scale_factor),)
    return ObservedJob(job, JobState.RUNNING, gpu, nodes, partner, measured_throughput=rate)


def _source(knowledge: Knowledge, rows: JobRows | None = None, given=None) -> RowSource:
    return RowSource(knowledge, cluster_rows(TABLE, TYPES), rows or JobRows(), given or {})


def test_learned_prior_is_the_type_row_object_until_a_measurement_differs():
    job = Job("1", RESNET)
    rows = JobRows()
    src = _source(Knowledge.LEARNED, rows)
    prior = src.cluster.row(RESNET, 1)
    assert src.row(ObservedJob(job, JobState.PENDING)) is prior
    assert src.marks(ObservedJob(job, JobState.PENDING)) == dict.fromkeys(TYPES, PRIOR)
    # a report equal to the prior (a trace without true rows): nothing changes
    o = _running(job, "v100", prior["v100"])
    record_measurements(rows, [o], {}, {"1": JobAccount({"v100": 400.0})})
    assert rows.revision == 0 and src.row(o) is prior
    assert src.marks(o)["v100"] == MEASURED and rows.measured["1"]["v100"].seconds == 400.0
    # a report that differs replaces that cell only, and bumps the revision
    o = _running(job, "v100", 2 * prior["v100"])
    record_measurements(rows, [o], {}, {"1": JobAccount({"v100": 800.0})})
    row = src.row(o)
    assert rows.revision == 1 and row["v100"] == 2 * prior["v100"]
    assert row["k80"] == prior["k80"] and row["p100"] == prior["p100"]
    assert src.row(o) is row  # the same object next round (the mechanism's cache)
    assert src.marks(o) == {"v100": MEASURED, "p100": PRIOR, "k80": PRIOR}


@pytest.mark.parametrize(
    "why",
    ["paired", "spread", "not running", "nan", "inf", "negative", "zero", "text"],
)
def test_only_a_job_running_alone_consolidated_with_a_usable_rate_measures_its_cell(why):
    job = Job("1", RESNET, scale_factor=1)
    rate: object = 9.0
    o = _running(job, "v100", 9.0)
    placement: dict = {}
    if why == "paired":
        o = _running(job, "v100", 9.0, partner="2")
    elif why == "spread":
        placement = {"1": JobPlacement("1", "v100", o.nodes, None, consolidated=False)}
    elif why == "not running":
        o = ObservedJob(job, JobState.HELD, measured_throughput=9.0)
    else:
        rate = {"nan": math.nan, "inf": math.inf, "negative": -3.0, "zero": 0.0, "text": "9"}[why]
        o = _running(job, "v100", rate)  # type: ignore[arg-type]
    rows = JobRows()
    record_measurements(rows, [o], placement, {})
    assert rows.measured == {} and rows.revision == 0


def test_finished_jobs_are_forgotten_and_counted():
    a, b = Job("a", RESNET), Job("b", RESNET)
    rows = JobRows()
    record_measurements(rows, [_running(a, "k80", 1.0), ObservedJob(b, JobState.PENDING)], {}, {})
    record_measurements(rows, [], {}, {})
    assert rows.measured == {} and rows.seen == set()
    assert (rows.finished, rows.finished_unmeasured, rows.cells_measured) == (2, 1, 1)


def test_type_blind_is_one_equal_row_per_kind():
    src = _source(Knowledge.TYPE_BLIND)
    one, two = Job("1", RESNET), Job("2", RESNET)
    row = src.row(ObservedJob(one, JobState.PENDING))
    prior = TABLE.row(RESNET, 1)
    geo = math.exp(sum(math.log(prior[t]) for t in TYPES) / 3)
    assert row == pytest.approx(dict.fromkeys(TYPES, geo))
    assert src.row(ObservedJob(two, JobState.PENDING)) is row  # aggregated into one class
    assert src.marks(ObservedJob(one, JobState.PENDING)) == dict.fromkeys(TYPES, TYPE_BLIND)


def test_oracle_uses_the_given_row_else_the_prior():
    given = {"1": {"v100": 1.0, "p100": 2.0, "k80": 3.0}}
    src = _source(Knowledge.ORACLE, given=given)
    o1 = ObservedJob(Job("1", RESNET), JobState.PENDING)
    o2 = ObservedJob(Job("2", RESNET), JobState.PENDING)
    assert src.row(o1) is given["1"] and src.marks(o1) == dict.fromkeys(TYPES, GIVEN)
    assert src.row(o2) is src.cluster.row(RESNET, 1)


def test_a_job_of_no_known_type_is_estimated_from_the_table_and_the_measured_jobs():
    untyped = Job("new", "my-llm-finetune")
    o = ObservedJob(untyped, JobState.PENDING)
    with pytest.raises(InputError, match="unknown job type"):
        _source(Knowledge.TABLE).prior(o)  # today's behaviour under TABLE knowledge
    rows = JobRows()
    src = _source(Knowledge.LEARNED, rows)
    typical = src.row(o)
    assert set(typical) == set(TYPES) and all(v > 0 for v in typical.values())
    assert src.marks(o) == dict.fromkeys(TYPES, ESTIMATED)
    # measured 10x the typical job on a v100: its other cells follow (one fit, jobs as rows)
    running = _running(untyped, "v100", 10 * typical["v100"])
    record_measurements(rows, [running], {}, {})
    row = src.row(running)
    assert row["v100"] == 10 * typical["v100"]
    assert row["k80"] > 3 * typical["k80"] and row["p100"] > 3 * typical["p100"]
    assert src.marks(running) == {"v100": MEASURED, "p100": ESTIMATED, "k80": ESTIMATED}


def test_estimate_job_rows_with_nothing_measured_anywhere_is_type_blind():
    empty = type(TABLE)()
    got = estimate_job_rows(empty, 1, TYPES, {"x": {}})
    assert got == {"x": dict.fromkeys(TYPES, 1.0)}
    # a GPU type nothing was measured on takes the job's level (type-blind for it)
    got = estimate_job_rows(TABLE, 1, ("v100", "mi300x"), {"x": {"v100": 5.0}})
    assert got["x"]["v100"] == 5.0 and got["x"]["mi300x"] > 0


@pytest.mark.hostile
@pytest.mark.parametrize("unit", [10.0, 0.1, 1e6, 1e-6])
def test_a_jobs_unit_moves_no_measured_jobs_estimate(unit):
    # a job that counts its steps in another unit (every figure `unit` times) is the
    # same job to the scheduler: the other measured jobs of no known type get the same
    # estimate, and only its own level follows its unit
    liar = {"v100": 4.0, "k80": 0.5}
    honest = {"h1": {"p100": 3.0}, "h2": {"v100": 5.0, "p100": 3.5}, "h3": {"k80": 0.9}}
    base = estimate_job_rows(TABLE, 1, TYPES, {"new": {}, **honest, "liar": liar})
    scaled = {t: v * unit for t, v in liar.items()}
    got = estimate_job_rows(TABLE, 1, TYPES, {"new": {}, **honest, "liar": scaled})
    for j in honest:
        assert got[j] == pytest.approx(base[j], rel=1e-6), j
    assert got["liar"]["p100"] == pytest.approx(base["liar"]["p100"] * unit, rel=1e-6)
    # a job with no cell takes the measured jobs' median level: one job's unit moves it
    # by one rank at most, however large (here the liar is already above or below the
    # others, so not at all)
    far = {t: v * unit * 1e3 if unit > 1 else v * unit / 1e3 for t, v in liar.items()}
    farther = estimate_job_rows(TABLE, 1, TYPES, {"new": {}, **honest, "liar": far})
    assert farther["new"] == pytest.approx(got["new"], rel=1e-6)
