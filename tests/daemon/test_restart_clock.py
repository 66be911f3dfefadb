"""daemon/restart_clock.py: each restart's cost measured from the checkpoint wait and
the restarted run's own progress, learned per job, capped against inflated reports."""

from __future__ import annotations

import pytest
from plugin_configs import overhead as with_overhead
from plugin_configs import restart_aware

from slurm_gavel.backends.cluster_spec import parse_cluster_spec
from slurm_gavel.backends.simulated import SimulatedCluster
from slurm_gavel.core.round_config import SchedulerConfig
from slurm_gavel.core.scheduler import run_round
from slurm_gavel.core.scheduler_state import JobAccount, SchedulerState
from slurm_gavel.daemon.metrics import DaemonMetrics
from slurm_gavel.daemon.restart_clock import RestartClock
from slurm_gavel.domain.cluster_model import ActResult, ClusterSnapshot, JobState, ObservedJob
from slurm_gavel.domain.model import Job
from slurm_gavel.domain.throughputs import load_table

TABLE = load_table()
RESNET = "ResNet-50 (batch size 64)"


class Tap(SimulatedCluster):
    """The simulated cluster as DaemonTap hands it to the round: keeping the snapshot
    each round observed, and reporting with each act the restarts the clock measured
    (each signalled job took ``wait`` seconds to leave)."""

    clock_: RestartClock
    wait: float
    state: SchedulerState

    def observe(self):  # type: ignore[no-untyped-def]
        self.last_snapshot = super().observe()
        return self.last_snapshot

    def act(self, placement):  # type: ignore[no-untyped-def]
        result = super().act(placement)
        waits = {j: self.wait for j in (*result.preempted, *result.moved)}
        return self.clock_.on_act(
            result, placement.start, self.last_snapshot, waits, self.state.jobs
        )


def _measure(
    overhead: float,
    wait: float,
    default: float = 0.0,
    rounds: int = 8,
    initial: float | None = None,
    keep: bool = False,
):
    rate = TABLE.throughput(RESNET, 1, "v100")
    # long jobs: restart-aware rounds keep a run that is within 4 protections of its
    # end to it (core/restart_aware/restart_aware.py), which would leave no restart to measure
    jobs = [Job(j, RESNET, 1, total_steps=rate * 50000.0) for j in ("a", "b")]
    tap = Tap(parse_cluster_spec("v100:1x1", TABLE), jobs, TABLE,
              preemption_overhead_seconds=overhead)  # fmt: skip
    # keep: restart-aware rounds keep each run 2 x its cost, long enough to report
    config = SchedulerConfig(
        table=TABLE, settings=with_overhead(overhead), plugins=restart_aware(keep, budget=0.5)
    )
    tap.clock_, tap.wait = RestartClock(default), wait
    metrics = DaemonMetrics()
    state = tap.state = SchedulerState()
    seen: list[tuple[str, float]] = []
    for _ in range(rounds):
        state, report = run_round(state, tap, config)
        tap.clock_.commit()
        if initial is not None and report.round_index == 0:
            for j in state.jobs:
                state.plugins.restart_costs[j] = initial
        seen += report.result.restart_costs
        metrics.record_restart_costs(report.result.restart_costs, tap.last_snapshot)
        tap.advance(tap.clock + 360.0)
        tap.completions.clear()
    return state, seen, metrics


def test_a_restart_costs_its_checkpoint_wait_plus_the_restore_before_progress():
    # Gavel time-slices a and b (A, B, B, A, A, ...): each resume restores for 100 s;
    # each signalled job took 20 s to leave
    state, seen, metrics = _measure(overhead=100.0, wait=20.0)
    assert seen and all(cost == pytest.approx(120.0) for _, cost in seen)
    assert {j for j, _ in seen} <= {"a", "b"}
    for j, _ in seen:
        assert state.plugins.restart_costs[j] == pytest.approx(120.0)
    got = metrics.registry.get_sample_value("slurm_gavel_restart_seconds_total")
    assert got == pytest.approx(120.0 * len(seen))
    gpu = metrics.registry.get_sample_value("slurm_gavel_restart_gpu_seconds_total")
    assert gpu == pytest.approx(120.0 * len(seen))  # one GPU each
    mean = metrics.registry.get_sample_value("slurm_gavel_restarts_per_job")
    assert mean == pytest.approx(sum(state.jobs[j].restarts for j in state.jobs) / len(state.jobs))


def test_the_learned_cost_is_the_mean_of_the_last_measurement_and_the_one_before():
    # a job that had learned 300 s measures 120 s k times: 120 + 180 / 2^k
    state, seen, _ = _measure(overhead=100.0, wait=20.0, initial=300.0)
    for j in state.jobs:
        k = sum(1 for job, _ in seen if job == j)
        assert state.plugins.restart_costs[j] == pytest.approx(120.0 + 180.0 / 2**k)
    assert any(job == j for job, _ in seen for j in state.jobs)


def test_an_inflated_restore_is_capped():
    # a job whose run shows progress only 1,000 s after its release (a user's report
    # claiming a slow restore) counts the cap, max(600 s, 4 x the admin default)
    _, seen, _ = _measure(overhead=1000.0, wait=0.0, rounds=20, keep=True)
    assert seen and all(cost == pytest.approx(600.0) for _, cost in seen)
    _, seen, _ = _measure(overhead=1000.0, wait=0.0, default=300.0, rounds=20, keep=True)
    assert seen and all(cost == pytest.approx(1000.0, abs=1e-6) for _, cost in seen)


def test_the_public_view_carries_each_job_s_learned_cost_for_report(tmp_path):
    # `report --state-dir` reads the status view: a measured cost must reach it
    from slurm_gavel.commands.status import load_view
    from slurm_gavel.daemon.config import parse_config
    from slurm_gavel.daemon.daemon import Daemon

    jobs = [Job(str(i), RESNET, 1, total_steps=1e7) for i in range(3)]
    sim = SimulatedCluster(parse_cluster_spec("v100:1x2", TABLE), jobs, TABLE)
    cfg = parse_config({"partitions": ["gpu"], "state_dir": str(tmp_path / "state")})
    d = Daemon(cfg, sim, table=TABLE, metrics=DaemonMetrics())
    d.store.acquire()
    d.round()
    d.state.plugins.restart_costs["0"] = 42.04
    sim.advance(sim.clock + 60.0)
    d.round()
    view, _ = load_view(tmp_path / "state")
    got = {j["id"]: j["restart_cost_s"] for j in view["jobs"]}
    assert got == {"0": 42.04, "1": None, "2": None}


def _snap(now: float, steps: float) -> ClusterSnapshot:
    job = ObservedJob(
        Job("a", RESNET, 1), JobState.RUNNING, steps_done=steps, measured_throughput=10.0
    )
    return ClusterSnapshot(time=now, nodes=(), jobs=(job,))


@pytest.mark.parametrize("round_failed", [False, True])
def test_the_clock_only_reports_and_a_failed_round_leaves_its_restarts_as_they_were(
    round_failed,
):
    # the clock writes nothing into the scheduler state: it reports with the act; what
    # it learned of the restarts in progress counts only once the round succeeded
    clock = RestartClock(0.0)
    accounts = {"a": JobAccount(steps_done=100.0)}
    before = SchedulerState(jobs=accounts).to_json()
    # round 1: a signalled, 20 s to leave
    r = clock.on_act(ActResult(preempted=("a",)), 0.0, _snap(0.0, 100.0), {"a": 20.0}, accounts)
    assert r.restart_costs == ()
    clock.commit()
    # round 2: a released (started again)
    clock.on_act(ActResult(started=("a",)), 100.0, _snap(100.0, 100.0), {}, accounts)
    if round_failed:
        clock.discard()
    else:
        clock.commit()
    # round 3: a ran 60 s of its 100 s since its release (600 steps at 10/s)
    r = clock.on_act(ActResult(kept=("a",)), 200.0, _snap(200.0, 700.0), {}, accounts)
    clock.commit()
    assert SchedulerState(jobs=accounts).to_json() == before
    if round_failed:
        assert r.restart_costs == ()  # its release was never committed
    else:
        assert r.restart_costs == (("a", pytest.approx(20.0 + 40.0)),)
