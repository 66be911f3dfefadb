"""core/restart_aware/consolidation.py: when the restart-aware round re-places a spread run. A run
larger than a node moves onto the fewest nodes it can use (the moldable cliff of issue
25); a run that fits on one node keeps the one-node room test exactly."""

from __future__ import annotations

import itertools
from dataclasses import replace

import pytest
from plugin_configs import overhead, restart_aware

from slurm_gavel.backends.cluster_spec import parse_cluster_spec
from slurm_gavel.backends.simulated import SimulatedCluster
from slurm_gavel.core.restart_aware.consolidation import (
    can_consolidate,
    fewer_nodes_fit,
    free_for,
    held_gpus,
    room_and_size,
)
from slurm_gavel.core.restart_aware.run_protection import RunProtection
from slurm_gavel.core.round_config import SchedulerConfig
from slurm_gavel.core.scheduler import run_round
from slurm_gavel.core.scheduler_state import SchedulerState
from slurm_gavel.domain.cluster_model import (
    JobPlacement,
    Node,
    NodeSlice,
    NodeState,
    RoundPlacement,
)
from slurm_gavel.domain.model import Job
from slurm_gavel.domain.throughputs import load_table

TABLE = load_table()
LM = "LM (batch size 10)"


def _run(job_id: str, gpu_type: str, *slices: tuple[str, int]) -> JobPlacement:
    return JobPlacement(job_id, gpu_type, tuple(NodeSlice(n, g) for n, g in slices), None, False)


def test_fewer_nodes_fit_needs_the_fewest_nodes_and_fewer_than_now():
    assert fewer_nodes_fit([4, 4, 2, 2], 8, 3, 2)  # two whole nodes
    assert not fewer_nodes_fit([4, 3, 3, 2], 8, 4, 2)  # 4+3+3: three nodes, not the fewest
    assert not fewer_nodes_fit([4, 4], 8, 2, 2)  # where it runs now: no gain
    assert not fewer_nodes_fit([4, 2, 1], 8, 4, 2)  # too few GPUs free
    assert not fewer_nodes_fit([], 8, 3, 2)
    assert fewer_nodes_fit([4, 4, 4], 12, 4, 3)


def test_free_for_counts_the_run_s_own_gpus_free_and_the_others_held():
    run = _run("a", "v100", ("n0", 2), ("n1", 2))
    other = _run("b", "v100", ("n1", 2))
    nodes = [
        Node("n0", "v100", 4),
        Node("n1", "v100", 4),
        Node("n2", "v100", 4, state=NodeState.DOWN),
        Node("k0", "k80", 4),
    ]
    held = held_gpus([run, other])
    assert held == {"n0": 2, "n1": 4}
    # n0: all 4 (2 its own); n1: its own 2 (b keeps 2); n2 down; k0 another type
    assert free_for(run, nodes, held) == [4, 2]


def test_room_and_size_per_type():
    nodes = [
        Node("n0", "v100", 4, gpus_held_unmanaged=3),
        Node("n1", "v100", 4, gpus_held_unmanaged=1),
        Node("n2", "v100", 8, state=NodeState.DOWN),
        Node("k0", "k80", 2),
    ]
    room, size = room_and_size(nodes)
    assert room == {"v100": 3, "k80": 2}
    assert size == {"v100": 4, "k80": 2}


def test_an_eight_gpu_run_on_four_gpu_nodes_moves_onto_two_whole_free_nodes_only():
    run = _run("L", "v100", ("v0", 4), ("v1", 2), ("v2", 2))
    nodes = [Node(f"v{i}", "v100", 4) for i in range(4)]
    room, size = room_and_size(nodes)
    # alone on the type: v0 + v3 hold it whole (before, no node had room for 8: never)
    assert can_consolidate(run, nodes, held_gpus([run]), room, size, True)
    # ... once the run has lasted its lease
    assert not can_consolidate(run, nodes, held_gpus([run]), room, size, False)
    # another run keeps 1 GPU of each of v1-v3: 4 + 3 + 3 free, three nodes, no move
    other = _run("B", "v100", ("v1", 1), ("v2", 1), ("v3", 1))
    assert not can_consolidate(run, nodes, held_gpus([run, other]), room, size, True)
    # already on two whole nodes: nothing to gain
    whole = _run("L", "v100", ("v0", 4), ("v1", 4))
    assert not can_consolidate(whole, nodes, held_gpus([whole]), room, size, True)
    # no UP node of its type: no move
    down = [replace(n, state=NodeState.DOWN) for n in nodes]
    r, s = room_and_size(down)
    assert not can_consolidate(run, down, held_gpus([run]), r, s, True)


def _one_node_room_test(run: JobPlacement, nodes: list[Node]) -> bool:
    """The test before this module (a4ffd77): some node of its type has room for it
    whole, other runs' GPUs counted free."""
    return max((n.usable_gpus for n in nodes if n.gpu_type == run.gpu_type), default=0) >= run.gpus


def test_a_run_that_fits_on_one_node_keeps_the_one_node_room_test():
    # A 2-GPU run spread 1+1 over two 2-GPU nodes whose other GPUs other runs hold:
    # the one-node test moves it (the others may move too), where "free with the
    # others in place" (1bdca68, reverted: it moved four windows' makespans) would not.
    run = _run("L", "v100", ("v0", 1), ("v1", 1))
    others = [_run("B", "v100", ("v0", 1)), _run("C", "v100", ("v1", 1))]
    nodes = [Node("v0", "v100", 2), Node("v1", "v100", 2)]
    room, size = room_and_size(nodes)
    held = held_gpus([run, *others])
    assert free_for(run, nodes, held) == [1, 1]  # nothing free with the others in place
    assert can_consolidate(run, nodes, held, room, size, False)
    # and over every occupancy of 3 nodes of 4 GPUs (protected runs taken out as
    # unmanaged GPUs), 2-, 3- and 4-GPU runs decide as the one-node test does, however
    # long the run has lasted
    for kept in itertools.product(range(5), repeat=3):
        nodes = [Node(f"v{i}", "v100", 4, gpus_held_unmanaged=k) for i, k in enumerate(kept)]
        room, size = room_and_size(nodes)
        for gpus, lasted in itertools.product((2, 3, 4), (False, True)):
            run = _run("L", "v100", ("v0", gpus - 1), ("v1", 1))
            held = held_gpus([run, _run("B", "v100", ("v2", 1))])
            got = can_consolidate(run, nodes, held, room, size, lasted)
            assert got is _one_node_room_test(run, nodes), (kept, gpus, lasted)


def _spread(
    spec: str, gpus: int, cost: float, aware: bool, *slices: tuple[str, int]
) -> tuple[SimulatedCluster, SchedulerConfig, SchedulerState]:
    """A GPUS-GPU LM job on the SPEC cluster, placed by hand spread over SLICES after
    a first round: the backend, the config and the state to run the next rounds on."""
    job = Job("L", LM, gpus, total_steps=TABLE.throughput(LM, gpus, "v100") * 50000.0)
    backend = SimulatedCluster(
        parse_cluster_spec(spec, TABLE), [job], TABLE, preemption_overhead_seconds=cost
    )
    config = SchedulerConfig(table=TABLE, settings=overhead(cost), plugins=restart_aware(aware))
    state, _ = run_round(SchedulerState(), backend, config)
    spread = _run("L", "v100", *slices)
    backend.act(RoundPlacement(1, backend.clock, {"L": spread}))
    state.placement = {"L": spread}
    return backend, config, state


# spec, GPUs, where the run is spread, nodes it ends on: restart-aware, Gavel's
SPREAD_RUNS = {
    # A 2-GPU job spread over two nodes (its table rate there is 4.6x lower); both
    # nodes are otherwise free: one restart buys 4.6x the rate, on one node.
    "two_gpus_on_two_nodes": ("v100:2x2", 2, (("v100-000", 1), ("v100-001", 1)), 1, 2),
    # An 8-GPU job spread 4+2+2 over three 4-GPU nodes (the table's spread rate is 9x
    # lower); all four nodes are otherwise free. It needs two whole nodes, which no
    # single node has room for: the restart-aware round must still consolidate it
    # (before, the one-node room test kept it spread for good: 415 h on a Philly
    # window, makespan 173 -> 544 h).
    "eight_gpus_on_three_nodes": (
        "v100:4x4", 8, (("v100-000", 4), ("v100-001", 2), ("v100-002", 2)), 2, 3
    ),
}  # fmt: skip


@pytest.mark.parametrize("aware", [False, True])
@pytest.mark.parametrize("case", sorted(SPREAD_RUNS))
def test_a_spread_run_is_consolidated_when_the_gain_pays_its_restart(case, aware):
    # Gavel's lease extension keeps the run spread; the restart-aware round moves it.
    spec, gpus, slices, aware_nodes, gavel_nodes = SPREAD_RUNS[case]
    backend, config, state = _spread(spec, gpus, 30.0, aware, *slices)
    state.plugins.restart_aware.get("L", RunProtection()).protected_until = None
    for _ in range(3):
        backend.advance(backend.clock + 360.0)
        state, report = run_round(state, backend, config)
    p = report.placement.jobs["L"]
    assert p.consolidated is aware and len(p.nodes) == (aware_nodes if aware else gavel_nodes)


def test_an_eight_gpu_spread_run_moves_only_once_it_has_lasted_its_lease():
    # The 8-GPU run above, restarts 300 s, budget 0.1: its lease is 3,000 s. Spread
    # at t0, it stays spread (lease extension) until it has run 3,000 s, then moves
    # onto two whole nodes, and then it stays there.
    spec, gpus, slices, _, _ = SPREAD_RUNS["eight_gpus_on_three_nodes"]
    backend, config, state = _spread(spec, gpus, 300.0, True, *slices)
    state.plugins.restart_aware["L"] = RunProtection(run_started=(t0 := backend.clock))
    nodes = []
    for _ in range(12):
        backend.advance(backend.clock + 360.0)
        state, report = run_round(state, backend, config)
        nodes.append((report.time - t0, len(report.placement.jobs["L"].nodes)))
    assert [n for t, n in nodes if t < 3000.0] == [3] * 8
    assert [n for t, n in nodes if t >= 3000.0] == [2] * 4
