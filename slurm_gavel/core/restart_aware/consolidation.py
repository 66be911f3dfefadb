"""Whether a spread run whose consolidation pays can be re-placed on fewer nodes now.

The restart-aware round (core/restart_aware/restart_aware.py) takes a spread run out of lease
extension (the mechanism places it afresh) when consolidating it pays its restart
(``consolidating_pays``) *and* the move can happen this round. Two cases:

* **A run that fits on one node of its type** (the common case, 2-4 GPUs on 4-GPU
  nodes): some node of its type has room for it whole, counting the GPUs of the other
  runs that are not protected as free (the mechanism may move those too). This is the
  test since a4ffd77, kept exactly: counting only the GPUs free with every other run in
  place (1bdca68, reverted in bc2acb0) changed the decision for these runs and moved the
  makespan on four of ten trace windows.
* **A run larger than the largest node of its type** (an 8-GPU job on 4-GPU nodes):
  no node ever has room for it whole, so under the one-node test such a run stayed
  spread for good (a moldable LM job on Philly 2017-10-05 ran 415 h on three nodes at a
  ninth of its consolidated rate: makespan 544 h against 173-181 h). It is re-placed
  when the GPUs free with every other run left where it is (lease extension places
  those first) hold it, most-free nodes first as the mechanism spreads, on the fewest
  nodes it can use, ceil(gpus / node size), and on fewer nodes than now, once the run
  has lasted its lease c / b (``lasted``): the restart that ends it then costs at most
  the budget's share of it, as a protected run's does. Without that wait (moving it as
  soon as the nodes are free) the makespan moved by +3 to +7 % on two Philly windows of
  ten at 300 s, where Gavel's rotation would end most such runs within a round or two
  anyway (EXPERIMENTS.md, "Two restart patterns").
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

from slurm_gavel.domain.cluster_model import JobPlacement, Node, NodeState
from slurm_gavel.domain.model import GpuType


def fewer_nodes_fit(free: list[int], gpus: int, nodes_now: int, least: int) -> bool:
    """Whether ``gpus`` fit in ``free`` (free GPUs per node), most-free nodes first as
    the mechanism spreads, on at most ``least`` nodes (the fewest the job can use) and on
    fewer than ``nodes_now``."""
    need, used = gpus, 0
    for f in sorted(free, reverse=True):
        if need <= 0:
            break
        need -= f
        used += 1
    return need <= 0 and used <= least and used < nodes_now


def held_gpus(placements: Iterable[JobPlacement]) -> dict[str, int]:
    """GPUs the given runs hold, per node."""
    held: dict[str, int] = {}
    for p in placements:
        for sl in p.nodes:
            held[sl.node] = held.get(sl.node, 0) + sl.gpus
    return held


def free_for(run: JobPlacement, nodes: Iterable[Node], held: Mapping[str, int]) -> list[int]:
    """Free GPUs per UP node of the run's type were every run in ``held`` but this one
    to stay (``nodes``: usable GPUs, protected runs taken out; ``held``: the other runs,
    and this one, as held_gpus counts them)."""
    own = {sl.node: sl.gpus for sl in run.nodes}
    return [
        f
        for n in nodes
        if n.gpu_type == run.gpu_type
        and n.state is NodeState.UP
        and (f := n.usable_gpus - held.get(n.name, 0) + own.get(n.name, 0)) > 0
    ]


def room_and_size(nodes: Iterable[Node]) -> tuple[dict[GpuType, int], dict[GpuType, int]]:
    """Per GPU type: the most usable GPUs on one node (room), and the most GPUs one UP
    node has (node size)."""
    room: dict[GpuType, int] = {}
    size: dict[GpuType, int] = {}
    for n in nodes:
        room[n.gpu_type] = max(room.get(n.gpu_type, 0), n.usable_gpus)
        if n.state is NodeState.UP:
            size[n.gpu_type] = max(size.get(n.gpu_type, 0), n.gpus)
    return room, size


def can_consolidate(
    run: JobPlacement,
    nodes: Iterable[Node],
    held: Mapping[str, int],
    room: Mapping[GpuType, int],
    size: Mapping[GpuType, int],
    lasted: bool,
) -> bool:
    """Whether the spread ``run`` can be placed afresh on fewer nodes this round (module
    doc): room on one node for a run that fits on one node of its type; else, once it
    has ``lasted`` its lease, the GPUs free with the runs in ``held`` kept hold it on
    ceil(gpus / node size) nodes, fewer than now. ``room``/``size``: room_and_size(nodes)."""
    node = size.get(run.gpu_type, 0)
    if node <= 0:
        return False
    if run.gpus <= node:
        return room.get(run.gpu_type, 0) >= run.gpus
    if not lasted:
        return False
    least = math.ceil(run.gpus / node)
    return fewer_nodes_fit(free_for(run, nodes, held), run.gpus, len(run.nodes), least)


__all__ = ["can_consolidate", "fewer_nodes_fit", "free_for", "held_gpus", "room_and_size"]
