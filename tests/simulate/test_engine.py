"""The simulation loop end to end: analytic JCTs, determinism, round skipping,
the Slurm baseline, and the summary contract."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from slurm_gavel.backends.cluster_spec import parse_cluster_spec
from slurm_gavel.core.round_settings import SIMULATOR_DEFAULTS
from slurm_gavel.domain.model import Job
from slurm_gavel.domain.throughputs import load_table
from slurm_gavel.simulate.engine import SimulationOptions, simulate
from slurm_gavel.simulate.generate import generate_trace

TABLE = load_table()
RESNET = "ResNet-50 (batch size 64)"
SPEC = "v100:3x4,p100:3x4,k80:3x4"


def test_a_job_alone_finishes_in_steps_over_throughput():
    rate = TABLE.throughput(RESNET, 1, "v100")
    job = Job("a", RESNET, 1, total_steps=rate * 5000.0, arrival_time=100.0)
    res = simulate([job], parse_cluster_spec("v100:1x1", TABLE), TABLE, "max_min_fairness")
    assert res.summary["jct_s"]["a"] == pytest.approx(5000.0, abs=1e-3)
    assert res.summary["preemptions"] == 0
    assert res.summary["utilization"] == pytest.approx(1.0, abs=1e-6)


@pytest.mark.parametrize("overhead", [0.0, 30.0])
def test_two_jobs_time_slice_one_gpu_and_pay_the_restart_overhead(overhead):
    # Each needs 1000 s of work; max-min fairness gives each half the GPU. Rounds
    # of 360 s go A, B, B, A, A (a tie keeps the running job: lease extension), so
    # A resumes once (one overhead) and finishes; B then resumes once too.
    rate = TABLE.throughput(RESNET, 1, "v100")
    jobs = [Job(j, RESNET, 1, total_steps=rate * 1000.0) for j in ("a", "b")]
    res = simulate(
        jobs,
        parse_cluster_spec("v100:1x1", TABLE),
        TABLE,
        "max_min_fairness",
        SimulationOptions(
            settings=replace(SIMULATOR_DEFAULTS, preemption_overhead_seconds=overhead)
        ),
    )
    jct = res.summary["jct_s"]
    assert jct["a"] == pytest.approx(1000.0 + 720.0 + overhead, abs=1e-3)
    assert jct["b"] == pytest.approx(2000.0 + 2 * overhead, abs=1e-3)
    assert res.summary["preemptions"] == 2


def _summary_text(policy: str, skip: bool = True, min_interval: float = 0.0) -> str:
    jobs = generate_trace(60, 900.0, TABLE, seed=5, multi_gpu=True)
    opts = SimulationOptions(
        record_wall_time=False,
        skip_stable_rounds=skip,
        seed=5,
        settings=replace(SIMULATOR_DEFAULTS, min_reallocation_interval_seconds=min_interval),
    )
    res = simulate(jobs, parse_cluster_spec(SPEC, TABLE), TABLE, policy, opts)
    return json.dumps(res.summary, indent=1)


@pytest.mark.parametrize("policy", ["max_min_fairness", "slurm_fifo"])
def test_same_trace_config_and_seed_give_a_byte_identical_summary(policy):
    assert _summary_text(policy) == _summary_text(policy)


@pytest.mark.parametrize("min_interval", [0.0, 1920.0])
def test_skipping_stable_rounds_does_not_change_results(min_interval):
    a = json.loads(_summary_text("max_min_fairness", skip=True, min_interval=min_interval))
    b = json.loads(_summary_text("max_min_fairness", skip=False, min_interval=min_interval))
    assert a["rounds"] < b["rounds"]
    for key in ("avg_jct_s", "p99_jct_s", "makespan_s", "preemptions", "utilization"):
        assert a[key] == pytest.approx(b[key], rel=1e-6), key
    assert a["jct_s"].keys() == b["jct_s"].keys()
    for j in a["jct_s"]:
        assert a["jct_s"][j] == pytest.approx(b["jct_s"][j], rel=1e-6)


def test_summary_has_the_design_md_keys():
    s = json.loads(_summary_text("isolated"))
    for key in (
        "policy",
        "jobs",
        "avg_jct_s",
        "p50_jct_s",
        "p99_jct_s",
        "makespan_s",
        "utilization",
        "preemptions",
        "wall_seconds",
        "jct_s",
    ):
        assert key in s
    assert s["jobs"] == 60 == len(s["jct_s"])
    assert 0 < s["utilization"] <= 1
    assert s["p50_jct_s"] <= s["p99_jct_s"]
    fairness = s["finish_time_fairness"]
    assert fairness["p50_rho"] <= fairness["max_rho"]


def test_slurm_fifo_backfills_short_jobs_without_delaying_the_head_and_never_preempts():
    r1 = TABLE.throughput(RESNET, 1, "v100")
    r4 = TABLE.throughput(RESNET, 4, "v100")
    jobs = [
        Job("long", RESNET, 1, total_steps=r1 * 10_000.0, arrival_time=0.0),
        Job("wide", RESNET, 4, total_steps=r4 * 1_000.0, arrival_time=10.0),  # blocked
        Job("short", RESNET, 1, total_steps=r1 * 1_000.0, arrival_time=20.0),  # backfills
        Job("late", RESNET, 1, total_steps=r1 * 50_000.0, arrival_time=30.0),  # would delay
    ]
    res = simulate(jobs, parse_cluster_spec("v100:1x4", TABLE), TABLE, "slurm_fifo")
    jct = res.summary["jct_s"]
    assert jct["short"] == pytest.approx(1_000.0, abs=1e-3)  # started on arrival
    assert jct["long"] == pytest.approx(10_000.0, abs=1e-3)
    # the 4-GPU job starts the moment "long" ends: its reservation held
    assert jct["wide"] == pytest.approx(10_000.0 + 1_000.0 - 10.0, abs=1e-3)
    # "late" waited for "wide" instead of starting at 30 s
    assert jct["late"] == pytest.approx(11_000.0 + 50_000.0 - 30.0, abs=1e-3)
    assert res.summary["preemptions"] == 0


def test_slurm_fifo_never_preempts_on_a_busy_trace():
    jobs = generate_trace(80, 300.0, TABLE, seed=2, multi_gpu=True)
    res = simulate(jobs, parse_cluster_spec(SPEC, TABLE), TABLE, "slurm_fifo")
    assert res.summary["preemptions"] == 0
    assert res.summary["jobs"] == 80


def test_gavel_policies_beat_fifo_on_average_jct_at_load():
    jobs = generate_trace(80, 600.0, TABLE, seed=4)
    nodes = parse_cluster_spec(SPEC, TABLE)
    mmf = simulate(jobs, nodes, TABLE, "max_min_fairness").summary
    fifo = simulate(jobs, nodes, TABLE, "slurm_fifo").summary
    assert mmf["avg_jct_s"] < fifo["avg_jct_s"]
