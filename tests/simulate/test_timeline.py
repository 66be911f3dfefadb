"""The utilisation timeline: it covers the makespan (rounds skipped as stable included),
shows idle gaps as idle, and integrates to the summary's utilisation."""

from __future__ import annotations

import pytest

from slurm_gavel.backends.cluster_spec import parse_cluster_spec
from slurm_gavel.domain.model import Job
from slurm_gavel.domain.throughputs import load_table
from slurm_gavel.simulate.engine import SimulationOptions, SimulationResult, simulate
from slurm_gavel.simulate.generate import generate_trace

TABLE = load_table()
RESNET = "ResNet-50 (batch size 64)"
SPEC = "v100:3x4,p100:3x4,k80:3x4"


def _integral(xs: list[float], ys: list[float]) -> float:
    return sum((xs[i + 1] - xs[i]) * ys[i] for i in range(len(xs) - 1))


def test_a_job_alone_is_one_span_at_full_use_until_it_finishes():
    rate = TABLE.throughput(RESNET, 1, "v100")
    job = Job("a", RESNET, 1, total_steps=rate * 50_000.0, arrival_time=100.0)
    res = simulate([job], parse_cluster_spec("v100:1x1", TABLE), TABLE, "max_min_fairness")
    # the rounds after the first are skipped as stable; their span still counts
    assert res.summary["rounds"] == 1
    assert res.metrics.timeline.steps("v100") == ([100.0, pytest.approx(50_100.0)], [1.0, 0.0])


def test_an_idle_gap_between_arrivals_is_idle():
    rate = TABLE.throughput(RESNET, 1, "v100")
    jobs = [
        Job("a", RESNET, 1, total_steps=rate * 1000.0, arrival_time=0.0),
        Job("b", RESNET, 1, total_steps=rate * 1000.0, arrival_time=5000.0),
    ]
    res = simulate(jobs, parse_cluster_spec("v100:1x1", TABLE), TABLE, "max_min_fairness")
    xs, ys = res.metrics.timeline.steps("v100")
    assert xs == pytest.approx([0.0, 1000.0, 5000.0, 6000.0])
    assert ys == pytest.approx([1.0, 0.0, 1.0, 0.0])


def _run(policy: str, skip: bool) -> SimulationResult:
    jobs = generate_trace(80, 600.0, TABLE, seed=7, multi_gpu=True)
    opts = SimulationOptions(skip_stable_rounds=skip, record_wall_time=False, progress=False)
    return simulate(jobs, parse_cluster_spec(SPEC, TABLE), TABLE, policy, opts)


@pytest.mark.parametrize("policy", ["max_min_fairness", "finish_time_fairness", "slurm_fifo"])
def test_the_timeline_covers_the_makespan_and_integrates_to_the_utilisation(policy):
    res = _run(policy, skip=True)
    s, tl = res.summary, res.metrics.timeline
    first = min(tl.times)
    for gpu_type in ("v100", "p100", "k80"):
        xs, ys = tl.steps(gpu_type)
        assert xs[0] == first
        assert xs[-1] - first == pytest.approx(s["makespan_s"], abs=1e-3)
        mean = _integral(xs, ys) / (xs[-1] - xs[0])
        assert mean == pytest.approx(s["utilization_by_type"][gpu_type], abs=1e-4)
        assert all(0.0 <= y <= 1.0 + 1e-9 for y in ys)


def test_skipping_rounds_leaves_the_timeline_integral_unchanged():
    fast, slow = _run("max_min_fairness", True), _run("max_min_fairness", False)
    assert fast.summary["rounds"] < slow.summary["rounds"]
    for gpu_type in ("v100", "p100", "k80"):
        a, b = fast.metrics.timeline.steps(gpu_type), slow.metrics.timeline.steps(gpu_type)
        assert a[0][-1] == pytest.approx(b[0][-1])
        assert _integral(*a) == pytest.approx(_integral(*b), rel=1e-9)
