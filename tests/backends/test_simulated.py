"""The simulated cluster: exact completion times, restart overhead, lease extension,
unconsolidated and paired throughputs, cluster specs."""

from __future__ import annotations

import pytest

from slurm_gavel.backends.cluster_spec import ClusterSpecError, parse_cluster_spec
from slurm_gavel.backends.simulated import SimulatedCluster
from slurm_gavel.domain.cluster_model import (
    ClusterBackend,
    JobPlacement,
    JobState,
    NodeSlice,
    RoundPlacement,
)
from slurm_gavel.domain.model import Job
from slurm_gavel.domain.throughputs import load_table

TABLE = load_table()
RESNET = "ResNet-50 (batch size 64)"
LM = "LM (batch size 5)"


def _place(job_id, gpu="v100", nodes=(("v100-000", 1),), partner=None, consolidated=True):
    return JobPlacement(
        job_id, gpu, tuple(NodeSlice(n, g) for n, g in nodes), partner, consolidated
    )


def _cluster(jobs, spec="v100:2x4,k80:1x4", overhead=30.0, **kw):
    return SimulatedCluster(
        parse_cluster_spec(spec, TABLE), jobs, TABLE, preemption_overhead_seconds=overhead, **kw
    )


def test_it_implements_the_backend_protocol():
    assert isinstance(_cluster([]), ClusterBackend)


def test_a_job_completes_at_its_exact_time_inside_a_round():
    rate = TABLE.throughput(RESNET, 1, "v100")
    job = Job("a", RESNET, 1, total_steps=1000.0, arrival_time=0.0)
    sim = _cluster([job])
    assert sim.observe().jobs[0].state is JobState.PENDING
    result = sim.act(RoundPlacement(0, 0.0, {"a": _place("a")}))
    assert result.started == ("a",)
    sim.advance(10_000.0)
    (c,) = sim.completions
    assert c.finish_time == pytest.approx(1000.0 / rate, rel=1e-12)
    done = [o for o in sim.observe().jobs if o.state is JobState.DONE]
    assert [o.job.id for o in done] == ["a"]
    assert sim.observe().jobs == ()  # reported once
    assert sim.done()


def test_keeping_a_job_costs_nothing_and_a_restart_pays_the_overhead():
    rate = TABLE.throughput(RESNET, 1, "v100")
    steps = rate * 1000.0  # 1000 s of work
    for overhead in (0.0, 45.0):
        sim = _cluster([Job("a", RESNET, 1, total_steps=steps)], overhead=overhead)
        sim.observe()
        sim.act(RoundPlacement(0, 0.0, {"a": _place("a")}))
        sim.advance(100.0)
        sim.observe()
        kept = sim.act(RoundPlacement(1, 100.0, {"a": _place("a")}))
        assert kept.kept == ("a",)
        sim.advance(200.0)
        sim.observe()
        pre = sim.act(RoundPlacement(2, 200.0, {}))
        assert pre.preempted == ("a",)
        sim.advance(300.0)
        obs = sim.observe().jobs[0]
        assert obs.state is JobState.HELD
        assert obs.steps_done == pytest.approx(rate * 200.0)
        sim.act(RoundPlacement(3, 300.0, {"a": _place("a", nodes=(("v100-001", 1),))}))
        sim.advance(10_000.0)
        (c,) = sim.completions
        # 200 s done, 100 s paused, the overhead, then the remaining 800 s
        assert c.finish_time == pytest.approx(300.0 + overhead + 800.0)
        assert c.restarts == 1


def test_a_move_is_a_restart_with_overhead():
    rate = TABLE.throughput(RESNET, 1, "v100")
    sim = _cluster([Job("a", RESNET, 1, total_steps=rate * 500.0)], overhead=20.0)
    sim.observe()
    sim.act(RoundPlacement(0, 0.0, {"a": _place("a")}))
    sim.advance(100.0)
    sim.observe()
    moved = sim.act(RoundPlacement(1, 100.0, {"a": _place("a", nodes=(("v100-001", 1),))}))
    assert moved.moved == ("a",)
    sim.advance(10_000.0)
    assert sim.completions[0].finish_time == pytest.approx(500.0 + 20.0)


def test_per_job_type_overhead_override():
    rate = TABLE.throughput(LM, 1, "v100")
    sim = _cluster(
        [Job("a", LM, 1, total_steps=rate * 500.0)],
        overhead=20.0,
        overhead_by_job_type={LM: 5.0},
    )
    sim.observe()
    sim.act(RoundPlacement(0, 0.0, {"a": _place("a")}))
    sim.advance(100.0)
    sim.observe()
    sim.act(RoundPlacement(1, 100.0, {"a": _place("a", nodes=(("v100-001", 1),))}))
    sim.advance(10_000.0)
    assert sim.completions[0].finish_time == pytest.approx(505.0)


def test_a_job_s_own_overhead_beats_the_type_and_global_figures():
    rate = TABLE.throughput(LM, 1, "v100")
    sim = _cluster(
        [
            Job("a", LM, 1, total_steps=rate * 500.0, restart_overhead=120.0),
            Job("b", LM, 1, total_steps=rate * 500.0),
        ],
        overhead=20.0,
        overhead_by_job_type={LM: 5.0},
    )
    sim.observe()
    first = {"a": _place("a"), "b": _place("b", nodes=(("v100-000", 1),))}
    sim.act(RoundPlacement(0, 0.0, first))
    sim.advance(100.0)
    sim.observe()
    moved = {j: _place(j, nodes=(("v100-001", 1),)) for j in ("a", "b")}
    sim.act(RoundPlacement(1, 100.0, moved))
    sim.advance(10_000.0)
    finish = {c.job.id: c.finish_time for c in sim.completions}
    assert finish == {"a": pytest.approx(620.0), "b": pytest.approx(505.0)}


def test_spread_jobs_run_at_the_unconsolidated_throughput():
    sf = 4
    fast = TABLE.throughput(RESNET, sf, "v100")
    slow = TABLE.throughput(RESNET, sf, "v100", consolidated=False)
    assert slow != fast  # (Gavel measured some spread jobs faster; the table decides)
    steps = 100_000.0
    sim = _cluster([Job("a", RESNET, sf, total_steps=steps)])
    sim.observe()
    spread = _place("a", nodes=(("v100-000", 2), ("v100-001", 2)), consolidated=False)
    sim.act(RoundPlacement(0, 0.0, {"a": spread}))
    sim.advance(1e9)
    assert sim.completions[0].finish_time == pytest.approx(steps / slow)


def test_a_pair_runs_at_the_pair_throughput_then_alone():
    pair = TABLE.pair(RESNET, LM, 1, "v100")
    assert pair is not None
    ra, rb = pair
    alone_b = TABLE.throughput(LM, 1, "v100")
    a = Job("a", RESNET, 1, total_steps=ra * 100.0)  # finishes at 100 s when paired
    b = Job("b", LM, 1, total_steps=rb * 300.0)
    sim = _cluster([a, b])
    sim.observe()
    res = sim.act(
        RoundPlacement(0, 0.0, {"a": _place("a", partner="b"), "b": _place("b", partner="a")})
    )
    assert res.failed == ()
    sim.advance(1e9)
    times = {c.job.id: c.finish_time for c in sim.completions}
    assert times["a"] == pytest.approx(100.0)
    # b did 100 s paired, then the rest alone
    assert times["b"] == pytest.approx(100.0 + rb * 200.0 / alone_b)


def test_invalid_placements_fail_one_job_not_the_round():
    sim = _cluster([Job("a", RESNET, 1, total_steps=10.0), Job("b", RESNET, 2, total_steps=10.0)])
    sim.observe()
    res = sim.act(
        RoundPlacement(
            0,
            0.0,
            {
                "a": _place("a", gpu="k80"),  # nodes are V100s
                "b": _place("b", nodes=(("v100-000", 2),)),
                "ghost": _place("ghost"),
            },
        )
    )
    assert {j for j, _ in res.failed} == {"a", "ghost"}
    assert res.started == ("b",)


def test_jobs_appear_at_their_arrival_time():
    sim = _cluster([Job("a", RESNET, 1, total_steps=10.0, arrival_time=50.0)])
    assert sim.observe().jobs == ()
    assert sim.next_arrival_time() == 50.0
    sim.advance(50.0)
    assert [o.job.id for o in sim.observe().jobs] == ["a"]


def test_cluster_spec_parsing_and_errors():
    nodes = parse_cluster_spec("v100:3x4,k80:1x2", TABLE)
    assert [(n.name, n.gpu_type, n.gpus) for n in nodes][-2:] == [
        ("v100-002", "v100", 4),
        ("k80-000", "k80", 2),
    ]
    for bad, needle in [
        ("v100:3", "TYPE:NODESxGPUS"),
        ("h100:1x8", "no GPU type 'h100'"),
        ("v100:1x4,v100:1x4", "twice"),
        ("v100:0x4", ">= 1"),
        ("", "empty"),
    ]:
        with pytest.raises(ClusterSpecError, match=needle):
            parse_cluster_spec(bad, TABLE)
