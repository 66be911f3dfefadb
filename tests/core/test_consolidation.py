"""core/consolidation.py: when a spread run fits on fewer nodes."""

from __future__ import annotations

from slurm_gavel.core.cluster_model import JobPlacement, Node, NodeSlice, NodeState
from slurm_gavel.core.consolidation import fewer_nodes_fit, free_for, held_gpus


def test_fewer_nodes_fit_needs_fewer_nodes_and_as_few_as_consolidated():
    assert fewer_nodes_fit([4, 4, 2, 2], 8, 3)  # two whole nodes
    assert not fewer_nodes_fit([4, 3, 3, 2], 8, 3)  # 4+3+3: no fewer nodes than now
    assert not fewer_nodes_fit([4, 2, 2], 8, 3)  # where it runs now: no gain
    assert not fewer_nodes_fit([4, 2, 1], 8, 4)  # too few GPUs free
    assert fewer_nodes_fit([2, 1], 2, 2)  # fits on one node: the old room test
    assert not fewer_nodes_fit([1, 1], 2, 2)
    # the fewest nodes the free GPUs allow, as the mechanism counts it (most free: 3)
    assert fewer_nodes_fit([3, 3, 3], 8, 4)
    assert not fewer_nodes_fit([], 1, 2)


def test_free_for_counts_the_runs_own_gpus_free_and_the_others_held():
    run = JobPlacement("a", "v100", (NodeSlice("n0", 2), NodeSlice("n1", 2)), None, False)
    other = JobPlacement("b", "v100", (NodeSlice("n1", 2),), None, True)
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
    assert fewer_nodes_fit(free_for(run, nodes, held), 4, len(run.nodes))
