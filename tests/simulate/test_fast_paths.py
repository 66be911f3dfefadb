"""The simulator's speed-ups must not change a decision.

assign() ranks plain tuples and selects on them (building Entry objects only for
the chosen candidates); it must equal the public composition
place_on_nodes(select(entries(...))) on any input. SimulatedCluster.act() no
longer pushes a finish-time heap entry for a kept job whose finish time did not
change; the heap must stay small and completions exact.
"""

from __future__ import annotations

import random

import pytest

from slurm_gavel.backends.base import JobPlacement, Node, NodeSlice, RoundPlacement
from slurm_gavel.backends.simulated import SimulatedCluster, parse_cluster_spec
from slurm_gavel.mechanism import (
    MechanismJob,
    assign,
    entries,
    pair_key,
    place_on_nodes,
    select,
)
from slurm_gavel.model import Allocation, Job, PairShare
from slurm_gavel.throughputs import load_table

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


def test_kept_jobs_do_not_grow_the_finish_heap_and_finish_exactly():
    rate = TABLE.throughput(RESNET, 1, "v100")
    job = Job("a", RESNET, 1, total_steps=rate * 100 * 360.0 + rate * 7.0)
    cluster = SimulatedCluster(parse_cluster_spec("v100:1x1", TABLE), [job], TABLE)
    place = {"a": JobPlacement("a", "v100", (NodeSlice("v100-000", 1),))}
    heap_sizes: list[int] = []
    for r in range(100):
        cluster.observe()
        result = cluster.act(RoundPlacement(r, cluster.clock, 360.0, place))
        assert result.kept == (() if r == 0 else ("a",))
        cluster.advance(cluster.clock + 360.0)
        heap_sizes.append(len(cluster._finish_heap))
    # recomputing the finish time each round can move it by an ulp (then a new entry
    # is pushed); before, every round pushed one: 100 entries by now
    assert max(heap_sizes) < 20, heap_sizes
    cluster.observe()
    cluster.act(RoundPlacement(100, cluster.clock, 360.0, place))
    cluster.advance(cluster.clock + 360.0)
    assert [c.finish_time for c in cluster.completions] == [pytest.approx(100 * 360.0 + 7.0)]
