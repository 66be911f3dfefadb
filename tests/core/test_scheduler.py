"""run_round: reallocation triggers, accounting, state persistence, robustness."""

from __future__ import annotations

import itertools
import json
from dataclasses import replace
from typing import Any

import pytest
from round_series import run_rounds

from slurm_gavel.backends.cluster_spec import parse_cluster_spec
from slurm_gavel.backends.simulated import SimulatedCluster
from slurm_gavel.core.plugin_settings import DAEMON_PLUGINS, MechanismSettings
from slurm_gavel.core.round_config import SchedulerConfig
from slurm_gavel.core.round_settings import DAEMON_DEFAULTS, RoundSettings
from slurm_gavel.core.scheduler import run_round
from slurm_gavel.core.scheduler_state import SchedulerState
from slurm_gavel.core.skips import SkipCode
from slurm_gavel.domain.cluster_model import (
    ActResult,
    ClusterSnapshot,
    JobState,
    Node,
    ObservedJob,
    RoundPlacement,
)
from slurm_gavel.domain.model import Job
from slurm_gavel.domain.throughputs import load_table
from slurm_gavel.errors import InputError
from slurm_gavel.simulate.slurm_baseline import BASELINES

TABLE = load_table()
RESNET = "ResNet-50 (batch size 64)"
LONG = 1e9  # steps: never finishes within a test


def settings(**over: Any) -> RoundSettings:
    return replace(DAEMON_DEFAULTS, **over)


def _sim(jobs, spec="v100:1x4,k80:1x4"):
    return SimulatedCluster(parse_cluster_spec(spec, TABLE), jobs, TABLE)


def test_allocation_is_recomputed_only_when_the_job_set_changes():
    jobs = [
        Job("a", RESNET, 1, total_steps=LONG),
        Job("b", RESNET, 2, total_steps=LONG),
        Job("c", RESNET, 1, total_steps=LONG, arrival_time=3000.0),
    ]
    sim = _sim(jobs)
    config = SchedulerConfig(table=TABLE)
    _, reports = run_rounds(sim, config, 14)
    flags = [r.reallocated for r in reports]
    # round 0 (a, b arrive) and the first round at or after 3000 s (c arrives)
    assert [i for i, f in enumerate(flags) if f] == [0, 9]


def test_a_minimum_interval_holds_a_changed_job_set_back():
    jobs = [
        Job("a", RESNET, 1, total_steps=LONG),
        Job("c", RESNET, 1, total_steps=LONG, arrival_time=700.0),
    ]
    config = SchedulerConfig(
        table=TABLE, settings=settings(min_reallocation_interval_seconds=1920.0)
    )
    _, reports = run_rounds(_sim(jobs), config, 8)
    # c arrives for round 2 (720 s); the next recomputation waits until 1,920 s (round 6)
    assert [i for i, r in enumerate(reports) if r.reallocated] == [0, 6]
    # meanwhile c has no fraction but takes a GPU the allocation leaves idle
    assert all("c" in r.placement.jobs for r in reports[2:])
    # without the interval it is recomputed as soon as c is there
    _, plain = run_rounds(_sim(jobs), SchedulerConfig(table=TABLE), 8)
    assert [i for i, r in enumerate(plain) if r.reallocated] == [0, 2]


def test_periodic_reallocation():
    sim = _sim([Job("a", RESNET, 1, total_steps=LONG)])
    config = SchedulerConfig(
        table=TABLE, settings=settings(round_seconds=100.0, reallocate_every_seconds=300.0)
    )
    _, reports = run_rounds(sim, config, 7)
    assert [i for i, r in enumerate(reports) if r.reallocated] == [0, 3, 6]


def test_time_received_is_accounted_per_type_and_sums_to_the_running_time():
    sim = _sim([Job("a", RESNET, 1, total_steps=LONG), Job("b", RESNET, 1, total_steps=LONG)])
    config = SchedulerConfig(table=TABLE)
    state, _ = run_rounds(sim, config, 10)
    state, _ = run_round(state, sim, config)  # credits the 10th round
    for job in ("a", "b"):
        acct = state.jobs[job]
        assert sum(acct.received_s.values()) == pytest.approx(10 * 360.0)
        assert acct.rounds == 11
    assert state.epoch_elapsed == pytest.approx(10 * 360.0)


def test_state_round_trips_through_json():
    sim = _sim([Job("a", RESNET, 1, total_steps=LONG), Job("b", RESNET, 4, total_steps=LONG)])
    config = SchedulerConfig(table=TABLE)
    state, _ = run_rounds(sim, config, 3)
    text = json.dumps(state.to_json(), sort_keys=True)
    again = SchedulerState.from_json(json.loads(text))
    assert json.dumps(again.to_json(), sort_keys=True) == text
    # and a restored state drives the next round exactly like the original would
    twin = _sim([Job("a", RESNET, 1, total_steps=LONG), Job("b", RESNET, 4, total_steps=LONG)])
    run_rounds(twin, config, 3)
    _, r1 = run_round(state, sim, config)
    _, r2 = run_round(again, twin, config)
    assert r1.placement == r2.placement


class _FailingBackend:
    """Reports a fixed snapshot and fails every start: failed jobs get no credit."""

    def __init__(self, jobs):
        self.time = 0.0
        self.jobs = jobs

    def observe(self) -> ClusterSnapshot:
        return ClusterSnapshot(
            self.time,
            (Node("n0", "v100", 4),),
            tuple(ObservedJob(j, JobState.PENDING) for j in self.jobs),
        )

    def act(self, placement: RoundPlacement) -> ActResult:
        return ActResult(failed=tuple((j, "boom") for j in placement.jobs))


def test_failed_starts_are_not_credited_and_unknown_types_are_skipped():
    jobs = [Job("a", RESNET, 1, total_steps=LONG), Job("x", "No Such Model", 1, total_steps=5.0)]
    backend = _FailingBackend(jobs)
    config = SchedulerConfig(table=TABLE)
    state, report = run_round(SchedulerState(), backend, config)
    assert [j for j, _ in report.skipped] == ["x"]
    assert report.skipped[0][1].code is SkipCode.UNKNOWN_TYPE
    assert "unknown job type" in report.skipped[0][1].detail
    assert "a" in report.placement.jobs
    backend.time = 360.0
    state, _ = run_round(state, backend, config)
    assert sum(state.jobs["a"].received_s.values()) == 0.0
    assert state.placement == {}


def test_slurm_fifo_pseudo_policy_runs_through_the_same_round():
    sim = _sim([Job("a", RESNET, 1, total_steps=LONG), Job("b", RESNET, 8, total_steps=LONG)])
    config = SchedulerConfig(table=TABLE, policy="slurm_fifo", baseline=BASELINES["slurm_fifo"])
    _, report = run_round(SchedulerState(), sim, config)
    assert set(report.placement.jobs) == {"a"}  # 8 GPUs of one type do not exist
    assert not report.reallocated


def test_a_baseline_name_without_the_baseline_is_an_unknown_policy():
    # The round knows no baseline by name: whoever runs it hands one in (the simulator).
    sim = _sim([Job("a", RESNET, 1, total_steps=LONG)])
    with pytest.raises(InputError, match="slurm_fifo"):
        run_round(SchedulerState(), sim, SchedulerConfig(table=TABLE, policy="slurm_fifo"))


STAY_TYPES = [RESNET, "A3C", "Transformer (batch size 64)", "LM (batch size 5)"]


def _types_per_round(n_jobs, spec, stay_credit_seconds, rounds=30):
    jobs = [Job(str(i), STAY_TYPES[i % 4], 1, total_steps=LONG) for i in range(n_jobs)]
    stay = MechanismSettings(stay_credit_seconds=stay_credit_seconds)
    config = SchedulerConfig(table=TABLE, plugins=replace(DAEMON_PLUGINS, mechanism=stay))
    _, reports = run_rounds(_sim(jobs, spec), config, rounds)
    return [{j: p.gpu_type for j, p in r.placement.jobs.items()} for r in reports]


def _type_switches(history):
    return sum(1 for a, b in itertools.pairwise(history) for j in b if a[j] != b[j])


def test_stay_credit_cuts_type_switches_in_an_underloaded_cluster():
    # 4 jobs on 4 GPUs: max-min fairness splits each about 0.5 v100 / 0.5 k80
    gavel = _types_per_round(4, "v100:1x2,k80:1x2", 0.0)
    credited = _types_per_round(4, "v100:1x2,k80:1x2", 1080.0)
    assert all(len(placed) == 4 for placed in gavel + credited)  # nobody waits
    assert _type_switches(credited) * 3 <= _type_switches(gavel)


def test_stay_credit_is_off_in_overloaded_rounds():
    # 3 jobs on 2 GPUs: the credit could keep a waiting job queued, so it is not applied
    gavel = _types_per_round(3, "v100:1x1,k80:1x1", 0.0)
    assert gavel == _types_per_round(3, "v100:1x1,k80:1x1", 1080.0)


@pytest.mark.parametrize("policy", ["max_min_fairness", "max_min_fairness_packed"])
def test_the_round_memo_changes_no_decision(policy):
    """run_round reuses what it derived from the job set while the backend reports the
    same Job objects (SchedulerState.caches.memo). A state reloaded from JSON every round
    (no memo, as after a daemon restart) must place every job the same way."""
    from slurm_gavel.core.scheduler_state import copy_state
    from slurm_gavel.simulate.generate import generate_trace

    jobs = generate_trace(40, 900.0, TABLE, seed=3)
    config = SchedulerConfig(table=TABLE, policy=policy)
    kept, reloaded = (
        _sim(jobs, "v100:1x4,p100:1x2,k80:1x4"),
        _sim(jobs, "v100:1x4,p100:1x2,k80:1x4"),
    )
    state_kept, state_reloaded = SchedulerState(), SchedulerState()
    quiet_rounds = 0
    for _ in range(150):
        state_kept, a = run_round(state_kept, kept, config)
        state_reloaded, b = run_round(copy_state(state_reloaded), reloaded, config)
        assert a.placement.jobs == b.placement.jobs
        assert a.reallocated == b.reallocated
        quiet_rounds += not a.reallocated
        for sim in (kept, reloaded):
            sim.advance(sim.clock + config.settings.round_seconds)
        if kept.done():
            break
    assert state_kept.to_json() == state_reloaded.to_json()
    assert quiet_rounds > 20  # the memo was used


def test_a_new_throughput_table_is_used_in_the_next_round_even_with_the_same_jobs():
    """The daemon swaps in an updated table (measured throughputs); the round memo
    must not keep serving rows of the old one."""
    import copy
    from dataclasses import replace

    jobs = [Job("a", RESNET, 1, total_steps=LONG), Job("b", RESNET, 1, total_steps=LONG)]
    sim = _sim(jobs)
    config = SchedulerConfig(table=TABLE)
    state, _ = run_rounds(sim, config, 2)
    slow = copy.deepcopy(TABLE)
    slow.alone[(RESNET, 1)]["k80"] = 0.0  # ResNet-50 can no longer run on a K80
    state, report = run_round(state, sim, replace(config, table=slow))
    assert all(p.gpu_type != "k80" for p in report.placement.jobs.values())
    assert state.caches.memo is not None and state.caches.memo.table is slow


class _WaitingBackend:
    """The simulated cluster, with one waiting job the cluster would not start (as the
    Slurm backend reports a job with an unfulfilled dependency)."""

    def __init__(self, inner, waiting: str) -> None:
        self.inner, self.waiting = inner, waiting

    def observe(self):
        snap = self.inner.observe()
        jobs = tuple(
            replace(o, waiting_on="it waits for its dependency afterok:1(unfulfilled)")
            if o.job.id == self.waiting
            else o
            for o in snap.jobs
        )
        return replace(snap, jobs=jobs)

    def act(self, placement):
        return self.inner.act(placement)

    @property
    def clock(self) -> float:
        return self.inner.clock

    def advance(self, until: float) -> None:
        self.inner.advance(until)


def test_a_job_the_cluster_would_not_start_gets_no_gpus_and_no_credit():
    # One V100 and two jobs: the first in line waits on a dependency, so the GPU goes
    # to the other, and the waiting job gets no time "received" while it waits.
    jobs = [Job("w", RESNET, 1, total_steps=LONG), Job("r", RESNET, 1, total_steps=LONG)]
    backend = _WaitingBackend(_sim(jobs, "v100:1x1"), "w")
    config = SchedulerConfig(table=TABLE)
    state, reports = run_rounds(backend, config, 3)
    for report in reports:
        assert list(report.placement.jobs) == ["r"]
        assert [j for j, _ in report.skipped] == ["w"]
        assert report.skipped[0][1].code is SkipCode.WAITING_ON_CLUSTER
        assert report.skipped[0][1].detail.startswith("Slurm would not start it now: it waits")
    assert sum(state.jobs["w"].received_s.values()) == 0.0
    assert sum(state.jobs["r"].received_s.values()) > 0.0


class _WithAFinishedStranger(_WaitingBackend):
    """The simulated cluster, whose snapshots also list a finished job this scheduler
    never saw active (as Slurm lists one for MinJobAge after a daemon start)."""

    def observe(self):
        snap = self.inner.observe()
        stranger = ObservedJob(Job("old", RESNET, 1), JobState.DONE, finish_time=0.0)
        return replace(snap, jobs=(*snap.jobs, stranger))


def test_only_jobs_it_managed_are_reported_completed():
    jobs = [Job("a", RESNET, 1, total_steps=1.0)]  # done within the first round
    backend = _WithAFinishedStranger(_sim(jobs, "v100:1x1"), "none")
    _, reports = run_rounds(backend, SchedulerConfig(table=TABLE), 3)
    completed = [o.job.id for r in reports for o in r.completed]
    assert completed == ["a"]  # once, and never the stranger
