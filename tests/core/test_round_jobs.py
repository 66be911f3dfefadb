"""The jobs a round works on (core/round_jobs.py): the memo that makes a quiet round
cheap never hands back rows the round would not compute afresh."""

from __future__ import annotations

from dataclasses import replace

from slurm_gavel.core.round_config import SchedulerConfig
from slurm_gavel.core.round_jobs import round_jobs
from slurm_gavel.core.scheduler_state import SchedulerState
from slurm_gavel.domain.cluster_model import Allowed, JobState, ObservedJob
from slurm_gavel.domain.model import Job
from slurm_gavel.domain.throughputs import load_table

TABLE = load_table()
RESNET = "ResNet-50 (batch size 64)"
CAPACITY = {"v100": 4, "k80": 4}


def _rows(state: SchedulerState, active: list[ObservedJob]) -> dict[str, dict[str, float]]:
    config = SchedulerConfig(table=TABLE, policy="max_min_fairness")
    considered, skipped, _, _ = round_jobs(state, active, config, dict(CAPACITY))
    return {o.job.id: dict(row) for o, row in considered} | {j: {} for j, _ in skipped}


def test_the_memo_sees_a_jobs_types_narrowed_or_widened_with_the_same_job():
    job = Job("a", RESNET, 1)
    free = ObservedJob(job, JobState.PENDING)
    only_v100 = replace(free, allowed=Allowed(frozenset({"v100-0"}), frozenset({"v100"})))
    state = SchedulerState()
    first = _rows(state, [free])
    assert first["a"]["k80"] > 0
    narrowed = _rows(state, [only_v100])  # the same Job object, fewer types
    assert narrowed == _rows(SchedulerState(), [only_v100])
    assert narrowed["a"]["k80"] == 0.0
    assert _rows(state, [free]) == first  # and widened again


def test_the_memo_sees_a_job_start_and_stop_waiting_on_the_cluster():
    job = Job("a", RESNET, 1)
    free = ObservedJob(job, JobState.PENDING)
    waiting = replace(free, waiting_on="its dependency")
    state = SchedulerState()
    assert _rows(state, [free])["a"]
    assert _rows(state, [waiting]) == {"a": {}}  # skipped: waiting on the cluster
    assert _rows(state, [free])["a"]
