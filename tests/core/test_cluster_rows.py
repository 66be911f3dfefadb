"""Day one on GPU types the throughput table lacks (cluster_rows.py): every job runs from
the first round, type-blind where nothing was measured, marked so, and the online
measurements fill the table in (estimates from similar job types, then measured)."""

from __future__ import annotations

import copy
import math
from dataclasses import replace

import pytest

from slurm_gavel.backends.cluster_spec import parse_cluster_spec
from slurm_gavel.backends.simulated import SimulatedCluster
from slurm_gavel.core.cluster_rows import ESTIMATED, TYPE_BLIND, cluster_rows
from slurm_gavel.core.estimate import Observation, update_table
from slurm_gavel.core.round_config import SchedulerConfig
from slurm_gavel.core.round_jobs import build_problem
from slurm_gavel.core.round_settings import DAEMON_DEFAULTS
from slurm_gavel.core.scheduler import run_round
from slurm_gavel.core.scheduler_state import SchedulerState
from slurm_gavel.core.skips import SkipCode
from slurm_gavel.domain.model import Job
from slurm_gavel.domain.throughputs import ThroughputTable, load_table

RESNET = "ResNet-50 (batch size 64)"
A3C = "A3C"
LM = "LM (batch size 5)"
SHIPPED = load_table()  # v100, p100, k80 only


def true_speeds(table: ThroughputTable) -> ThroughputTable:
    """What the simulated A100/H100 nodes really do: 2x and 3x a V100."""
    out = copy.deepcopy(table)
    for row in out.alone.values():
        row["a100"], row["h100"] = 2 * row.get("v100", 0.0), 3 * row.get("v100", 0.0)
    return out


def geomean(values: list[float]) -> float:
    return math.exp(sum(map(math.log, values)) / len(values))


def day_one_round(table: ThroughputTable, jobs: list[Job], spec: str = "a100:1x4,h100:1x4"):
    sim = SimulatedCluster(parse_cluster_spec(spec), jobs, true_speeds(table))
    state = SchedulerState()
    config = SchedulerConfig(table=table, settings=replace(DAEMON_DEFAULTS, round_seconds=60))
    return run_round(state, sim, config)


JOBS = [Job(str(i), (RESNET, A3C, LM)[i % 3], 1, total_steps=1e6) for i in range(6)] + [
    Job("6", RESNET, 2, total_steps=1e6)
]


def test_every_job_runs_from_the_first_round_on_types_the_table_lacks():
    state, report = day_one_round(SHIPPED, JOBS)
    assert report.skipped == ()
    assert sorted(report.placement.jobs) == sorted(j.id for j in JOBS)  # 8 GPUs, 8 wanted
    assert {p.gpu_type for p in report.placement.jobs.values()} == {"a100", "h100"}
    alloc = state.allocation
    assert alloc is not None
    for job in JOBS:
        assert sum(alloc.fractions[job.id].values()) == pytest.approx(1.0, abs=1e-6)


def test_unmeasured_cells_are_type_blind_and_marked():
    _, report = day_one_round(SHIPPED, JOBS)
    cells = {(jt, sf, t): mark for jt, sf, t, mark in report.unmeasured}
    kinds = {(j.job_type, j.scale_factor) for j in JOBS}
    assert cells == {(jt, sf, t): TYPE_BLIND for jt, sf in kinds for t in ("a100", "h100")}
    rows = cluster_rows(SHIPPED, ["a100", "h100"])
    for jt, sf in kinds:
        row, known = rows.row(jt, sf), SHIPPED.row(jt, sf)
        # the same figure on both types: the policy cannot tell them apart for this job
        assert row["a100"] == row["h100"] == pytest.approx(geomean(list(known.values())))
        assert {t: row[t] for t in known} == known  # the table's own figures untouched


def test_the_problem_the_policy_sees_has_the_type_blind_figures():
    sim = SimulatedCluster(parse_cluster_spec("a100:1x4,h100:1x4"), JOBS, true_speeds(SHIPPED))
    config = SchedulerConfig(table=SHIPPED)
    rows = cluster_rows(SHIPPED, ["a100", "h100"])
    active = sim.observe().active_jobs()
    considered = [(o, rows.row(o.job.job_type, o.job.scale_factor)) for o in active]
    problem = build_problem(considered, SchedulerState(), config, {"a100": 4, "h100": 4}, 0.0)
    for pj in problem.jobs:
        assert pj.throughput["a100"] == pj.throughput["h100"] > 0


def test_an_observation_turns_its_column_into_estimates_and_its_cell_into_a_measurement():
    learned = update_table(SHIPPED, [Observation(RESNET, 1, "a100", 9.0)])
    rows = cluster_rows(learned, ["a100", "h100"])
    assert rows.row(RESNET, 1)["a100"] == 9.0
    assert rows.marks(RESNET, 1) == {"h100": TYPE_BLIND}  # a100 measured
    # the other job types at scale factor 1: estimated from ResNet-50's speed-up on a100
    assert rows.marks(A3C, 1) == {"a100": ESTIMATED, "h100": TYPE_BLIND}
    assert rows.row(A3C, 1)["a100"] > SHIPPED.row(A3C, 1)["v100"]
    # nothing measured on a100 at scale factor 2 yet
    assert rows.marks(RESNET, 2) == {"a100": TYPE_BLIND, "h100": TYPE_BLIND}
    # type-blind is relative to what the cluster has: h100 = ResNet-50's a100 figure
    assert rows.row(RESNET, 1)["h100"] == pytest.approx(9.0)
    # the source table is not changed, and estimates are marked as such in the copy
    assert "a100" not in learned.row(A3C, 1)
    assert (rows.filled.note(A3C, 1, "a100") or "").startswith("estimate:")


def test_after_observations_the_round_reports_estimates_then_nothing():
    learned = update_table(
        SHIPPED,
        [Observation(jt, sf, t, 5.0) for jt in (RESNET, A3C) for sf in (1, 2) for t in ("a100",)],
    )
    _, report = day_one_round(learned, JOBS)
    cells = {(jt, sf, t): mark for jt, sf, t, mark in report.unmeasured}
    assert cells[(LM, 1, "a100")] == ESTIMATED
    assert (RESNET, 1, "a100") not in cells and (RESNET, 2, "a100") not in cells
    assert cells[(RESNET, 1, "h100")] == TYPE_BLIND


def test_a_cluster_the_table_covers_gets_the_tables_own_rows():
    rows = cluster_rows(SHIPPED, ["v100", "k80"])
    assert rows.filled is SHIPPED and rows.complete
    assert rows.marked_cells(SHIPPED.alone) == ()
    for key in SHIPPED.alone:
        assert rows.row(*key) is SHIPPED.alone[key]  # identity: the mechanism's cache
        assert rows.marks(*key) == {}


def test_zero_still_means_cannot_run():
    big = "ResNet-50 (batch size 128)"  # 0 on k80 at 2+ GPUs
    rows = cluster_rows(SHIPPED, ["k80", "a100"])
    row = rows.row(big, 2)
    assert row["k80"] == 0.0
    # no positive figure on the cluster's types: the job's figures on every type it has
    known = SHIPPED.row(big, 2)
    assert row["a100"] == pytest.approx(geomean([known["p100"], known["v100"]]))


def test_a_job_with_no_positive_figure_anywhere_is_still_skipped():
    table = ThroughputTable(alone={("stuck", 1): {"v100": 0.0}, ("fine", 1): {"v100": 1.0}})
    jobs = [Job("1", "stuck", 1), Job("2", "fine", 1), Job("3", "not in the table", 1)]
    _, report = day_one_round(table, jobs, spec="a100:1x2")
    skipped = dict(report.skipped)
    assert skipped["1"].code is SkipCode.NO_USABLE_TYPE
    assert skipped["1"].detail == "no usable GPU type has a throughput for it"
    assert skipped["3"].code is SkipCode.UNKNOWN_TYPE and "unknown job type" in skipped["3"].detail
    assert list(report.placement.jobs) == ["2"]


def test_a_cell_missing_from_a_measured_column_is_estimated_not_zero():
    """A missing cell means "not measured" (write 0 for "cannot run"): a table profiled
    for some job types on a GPU type estimates the others there."""
    table = ThroughputTable(
        alone={("a", 1): {"v100": 2.0, "k80": 1.0}, ("b", 1): {"v100": 4.0}},
    )
    rows = cluster_rows(table, ["v100", "k80"])
    assert rows.marks("b", 1) == {"k80": ESTIMATED}
    assert rows.row("b", 1)["k80"] == pytest.approx(2.0, rel=0.3)


def test_estimates_the_table_holds_are_marked_too():
    """A table written by `slurm-gavel profile --estimate` has estimates for a type."""
    table = copy.deepcopy(SHIPPED)
    table.set_note(A3C, 1, "k80", "estimate: low-rank completion ...")
    rows = cluster_rows(table, ["v100", "k80"])
    assert not rows.complete
    assert rows.marked_cells([(A3C, 1), (RESNET, 1)]) == ((A3C, 1, "k80", ESTIMATED),)


def test_as_table_holds_the_completed_rows_and_is_the_table_when_complete():
    assert cluster_rows(SHIPPED, ["v100", "k80"]).as_table() is SHIPPED
    rows = cluster_rows(SHIPPED, ["a100", "h100"])
    view = rows.as_table()
    assert view.alone.keys() == SHIPPED.alone.keys()
    for key in SHIPPED.alone:
        assert view.row(*key) == rows.row(*key)
    assert "a100" not in SHIPPED.row(A3C, 1)  # the source table is left alone
