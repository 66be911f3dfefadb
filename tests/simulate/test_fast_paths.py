"""The simulator's speed-ups must not change a decision.

assign() ranks plain tuples and selects on them, and may take its per-allocation
candidates precomputed (mechanism.single_candidates); it must equal the public
composition place_on_nodes(select(entries(...))) on any input.
SimulatedCluster finds the next completion by scanning its running jobs (no
heap): completions stay exact, and simultaneous ones come in job id order.
"""

from __future__ import annotations

import random

import pytest

from slurm_gavel.backends.cluster_spec import parse_cluster_spec
from slurm_gavel.backends.simulated import SimulatedCluster
from slurm_gavel.core.mechanism import (
    MechanismJob,
    assign,
    entries,
    pair_key,
    place_on_nodes,
    select,
)
from slurm_gavel.domain.cluster_model import JobPlacement, Node, NodeSlice, RoundPlacement
from slurm_gavel.domain.model import Allocation, Job, PairShare
from slurm_gavel.domain.throughputs import load_table

TYPES = ("v100", "p100", "k80")
TABLE = load_table()
RESNET = "ResNet-50 (batch size 64)"


def _random_case(rng: random.Random):
    nodes = [Node(f"{t}-{i}", t, rng.choice((1, 2, 4))) for t in TYPES for i in range(3)]
    n_jobs = rng.randint(1, 30)
    ids = [f"j{i}" for i in range(n_jobs)]
    jobs: dict[str, MechanismJob] = {}
    fractions: dict[str, dict[str, float]] = {}
    for j in ids:
        sf = rng.choice((1, 1, 1, 2, 4))
        tput = {t: rng.choice((0.0, 1.0, 2.5)) for t in TYPES}
        current = None
        if rng.random() < 0.4:
            t = rng.choice(TYPES)
            ns = [n for n in nodes if n.gpu_type == t and n.gpus >= sf]
            if ns:
                current = JobPlacement(j, t, (NodeSlice(rng.choice(ns).name, sf),))
        jobs[j] = MechanismJob(j, sf, tput, current)
        # ties on purpose: fractions and received times from small sets
        fractions[j] = {t: rng.choice((0.0, 0.0, 0.25, 0.5)) for t in TYPES}
    pairs = []
    for _ in range(rng.randint(0, 5)):
        a, b = rng.sample(ids, 2) if n_jobs > 1 else (ids[0], ids[0])
        if a != b:
            pairs.append(PairShare((a, b), {rng.choice(TYPES): rng.choice((0.1, 0.3))}))
    received = {
        k: {t: rng.choice((0.0, 360.0, 720.0)) for t in TYPES}
        for k in ids + [pair_key(*p.jobs) for p in pairs]
        if rng.random() < 0.6
    }
    elapsed = rng.choice((0.0, 360.0, 1080.0))
    return Allocation("test", fractions, pairs), jobs, nodes, received, elapsed


@pytest.mark.parametrize("seed", range(200))
def test_assign_equals_the_public_composition(seed):
    alloc, jobs, nodes, received, elapsed = _random_case(random.Random(seed))
    capacity: dict[str, int] = {}
    for n in nodes:
        capacity[n.gpu_type] = capacity.get(n.gpu_type, 0) + n.usable_gpus
    ranked = entries(alloc, jobs, received, elapsed, capacity)
    expected = place_on_nodes(select(ranked, jobs, capacity), jobs, nodes)
    assert assign(alloc, jobs, nodes, received, elapsed) == expected


def test_a_kept_job_finishes_at_its_exact_time():
    rate = TABLE.throughput(RESNET, 1, "v100")
    job = Job("a", RESNET, 1, total_steps=rate * 100 * 360.0 + rate * 7.0)
    cluster = SimulatedCluster(parse_cluster_spec("v100:1x1", TABLE), [job], TABLE)
    place = {"a": JobPlacement("a", "v100", (NodeSlice("v100-000", 1),))}
    for r in range(100):
        cluster.observe()
        result = cluster.act(RoundPlacement(r, cluster.clock, place))
        assert result.kept == (() if r == 0 else ("a",))
        cluster.advance(cluster.clock + 360.0)
        assert not cluster.completions
    cluster.observe()
    cluster.act(RoundPlacement(100, cluster.clock, place))
    cluster.advance(cluster.clock + 360.0)
    assert [c.finish_time for c in cluster.completions] == [pytest.approx(100 * 360.0 + 7.0)]


@pytest.mark.parametrize("seed", range(100))
def test_precomputed_single_candidates_change_nothing(seed):
    from slurm_gavel.core.mechanism import single_candidates

    alloc, jobs, nodes, received, elapsed = _random_case(random.Random(seed))
    types = list(dict.fromkeys(n.gpu_type for n in nodes))
    singles = single_candidates(alloc, jobs, types)
    for credit in (0.0, 300.0):
        expected = assign(alloc, jobs, nodes, received, elapsed, stay_credit_seconds=credit)
        got = assign(
            alloc, jobs, nodes, received, elapsed, stay_credit_seconds=credit, singles=singles
        )
        assert got == expected


def test_jobs_finishing_at_the_same_instant_complete_in_id_order():
    rate = TABLE.throughput(RESNET, 1, "v100")
    jobs = [Job(j, RESNET, 1, total_steps=rate * 100.0) for j in ("b", "c", "a")]
    cluster = SimulatedCluster(parse_cluster_spec("v100:1x4", TABLE), jobs, TABLE)
    cluster.observe()
    place = {j.id: JobPlacement(j.id, "v100", (NodeSlice("v100-000", 1),)) for j in jobs}
    cluster.act(RoundPlacement(0, 0.0, place))
    assert cluster.next_completion_time() == pytest.approx(100.0)
    cluster.advance(360.0)
    assert [c.job.id for c in cluster.completions] == ["a", "b", "c"]
    assert cluster.next_completion_time() is None
