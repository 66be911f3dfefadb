"""Where a spread multi-GPU run could run on fewer nodes, from the free GPUs per node.

The restart-aware round (core/restart_aware.py) moves a spread run only when
consolidating it pays its restart *and* the move can happen this round: the mechanism
places a job afresh on the nodes with the most free GPUs first (node_placement), so the
run lands on fewer nodes only if those nodes, once every other run stays where it is,
hold it. Before these helpers the test was "some node has room for the whole job",
which an 8-GPU job on 4-GPU nodes never passes: such a job stayed spread for good (a
moldable LM job on a Philly window ran 415 h at a ninth of its consolidated rate).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

from slurm_gavel.core.cluster_model import JobPlacement, Node, NodeState


def fewer_nodes_fit(free: list[int], gpus: int, nodes_now: int) -> bool:
    """Whether ``gpus`` fit, most-free nodes first (as the mechanism spreads), on fewer
    nodes than ``nodes_now`` and on as few as the mechanism calls consolidated
    (ceil(gpus / the most free on one node)). For a job that fits on one node this is
    "some node has room for it whole"; an 8-GPU job on 4-GPU nodes needs two whole
    nodes, which the one-node test never found, so it stayed spread for good."""
    if not free:
        return False
    need, used = gpus, 0
    for f in sorted(free, reverse=True):
        if need <= 0:
            break
        need -= f
        used += 1
    return need <= 0 and used < nodes_now and used <= math.ceil(gpus / max(free))


def held_gpus(placements: Iterable[JobPlacement]) -> dict[str, int]:
    """GPUs the given runs hold, per node."""
    held: dict[str, int] = {}
    for p in placements:
        for sl in p.nodes:
            held[sl.node] = held.get(sl.node, 0) + sl.gpus
    return held


def free_for(run: JobPlacement, nodes: Iterable[Node], held: Mapping[str, int]) -> list[int]:
    """Free GPUs per node of the run's type were every run in ``held`` but this one to
    stay (``nodes``: usable GPUs, runs not taken out)."""
    own = {sl.node: sl.gpus for sl in run.nodes}
    return [
        f
        for n in nodes
        if n.gpu_type == run.gpu_type
        and n.state is NodeState.UP
        and (f := n.usable_gpus - held.get(n.name, 0) + own.get(n.name, 0)) > 0
    ]


__all__ = ["fewer_nodes_fit", "free_for", "held_gpus"]
