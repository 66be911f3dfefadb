"""Exploration (core/learned_rows/explore.py): a job's unmeasured GPU types look better
only while it has budget left; leaving the budget rebuilds its row without the bonus."""

from __future__ import annotations

import pytest

from slurm_gavel.core.cluster_rows import rows_for
from slurm_gavel.core.learned_rows.explore import Exploration, optimistic
from slurm_gavel.core.learned_rows.job_rows import (
    JobRows,
    Knowledge,
    RowSource,
    record_measurements,
)
from slurm_gavel.core.scheduler_state import JobAccount
from slurm_gavel.domain.cluster_model import JobPlacement, JobState, ObservedJob
from slurm_gavel.domain.model import Job
from slurm_gavel.domain.throughputs import load_table

X = Exploration(bonus=2.0, max_restarts=1, max_gpu_seconds=600.0)


def test_budget():
    assert X.within_budget(0, {"v100": 100.0}, 2)
    assert not X.within_budget(0, {"v100": 300.0}, 2)  # 600 GPU-seconds spent
    assert not X.within_budget(1, {}, 1)
    assert optimistic({"v100": 1.0, "k80": 2.0}, {"v100"}, 2.0) == {"v100": 1.0, "k80": 4.0}
    for bad in ({"bonus": 0.5}, {"max_restarts": -1}, {"max_gpu_seconds": float("nan")}):
        with pytest.raises(ValueError):
            Exploration(**bad)  # type: ignore[arg-type]


def test_an_exploring_job_sees_its_unmeasured_types_better_until_its_budget_is_spent():
    table = load_table()
    cluster = rows_for(None, table, {"v100": 1, "k80": 1})
    rows = JobRows()
    job = Job("1", "", 1)
    running = ObservedJob(job=job, state=JobState.RUNNING, gpu_type="k80", measured_throughput=3.0)
    placement = {"1": JobPlacement("1", "k80", (), None, True)}
    acct = JobAccount(received_s={"k80": 60.0})
    record_measurements(rows, [running], placement, {"1": acct}, explore=X)
    source = RowSource(Knowledge.LEARNED, cluster, rows, explore=X)
    row = source.row(running)
    assert row["k80"] == 3.0  # measured: as measured
    assert "1" in rows.exploring
    before = rows.revision
    acct.received_s["k80"] = 600.0  # budget spent
    record_measurements(rows, [running], placement, {"1": acct}, explore=X)
    assert "1" not in rows.exploring and rows.revision > before
    after = source.row(running)
    assert after["k80"] == 3.0
    assert row["v100"] == pytest.approx(2.0 * after["v100"])
    # without an exploration budget the same job never sees the bonus
    rows2 = JobRows()
    record_measurements(rows2, [running], placement, {"1": JobAccount({"k80": 60.0})})
    assert RowSource(Knowledge.LEARNED, cluster, rows2).row(running) == after
