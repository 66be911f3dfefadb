"""Node choice, the mechanism's last step: this round's chosen entries -> nodes.

mechanism.py picks which jobs (and space-sharing pairs) run on which GPU type this
round, within the GPUs each type has in all; this module picks their nodes, type by
type, from the free GPUs per node:

* Lease extension: an entry on the type it already runs on keeps its nodes when those
  are still free (and allowed): no restart.
* The rest, largest first (Gavel assigns in decreasing scale factor to limit
  fragmentation; ties keep priority order): on the nodes it prefers (--prefer) if
  they fit it; within its allowed nodes (MechanismJob.nodes: its own request) if it
  has any, else it waits this round; else best fit on one node, else the fewest nodes
  (most free first). A job on more nodes than the type's biggest nodes would need is
  marked unconsolidated, so the table's unconsolidated throughput applies.
* A job whose request fixes its node count (PlacedJob.node_count: sbatch -N 2, or its
  tasks over --ntasks-per-node) runs on exactly that many nodes, scale_factor / count
  GPUs on each (best fit per node, preferred nodes first), or waits this round: packed
  onto fewer nodes, Slurm finds its tasks per node unsatisfiable (22.05: never runnable)
  or runs fewer ranks than it asked (26.05). Such a placement is as consolidated as its
  request allows, so it is marked consolidated. A count that does not divide its GPUs
  (or a pair whose members' counts differ) cannot be laid out: it waits.

Free GPUs are kept per type in buckets by free count (_FreePool), so best fit and
most-free cost O(GPUs per node), not O(nodes), on big clusters. Pure, deterministic
(snapshot order breaks ties).
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable, Mapping
from operator import itemgetter
from typing import Protocol

from slurm_gavel.domain.cluster_model import JobPlacement, Node, NodeSlice, slices_fit
from slurm_gavel.domain.model import GpuType, JobId


class PlacedJob(Protocol):
    """What node choice reads of a job (mechanism.MechanismJob has it)."""

    @property
    def scale_factor(self) -> int: ...
    @property
    def current(self) -> JobPlacement | None: ...  # where it runs now, if it runs
    @property
    def nodes(self) -> frozenset[str] | None: ...  # the only nodes it may use; None: any
    @property
    def prefer(self) -> frozenset[str] | None: ...  # nodes it would rather have
    @property
    def node_count(self) -> int | None: ...  # the exact nodes its request asks; None: any


class _FreePool:
    """Free GPUs on the nodes of one type, bucketed by free count, so best fit and
    most-free are O(GPUs per node) rather than O(nodes) on big clusters. Within a
    bucket, nodes keep their snapshot order (deterministic, first node first)."""

    def __init__(self) -> None:
        self.free: dict[str, int] = {}
        self.order: dict[str, int] = {}
        self.buckets: list[list[tuple[int, str]]] = [[]]
        self.biggest = 0

    def add(self, name: str, gpus: int, index: int) -> None:
        """A node with `gpus` free; nodes come in increasing `index` (snapshot order),
        so appending keeps each bucket sorted without an insort (this runs every round)."""
        self.free[name] = gpus
        self.order[name] = index
        while len(self.buckets) <= gpus:
            self.buckets.append([])
        self.buckets[gpus].append((index, name))
        if gpus > self.biggest:
            self.biggest = gpus

    def take(self, name: str, gpus: int) -> None:
        f = self.free[name]
        item = (self.order[name], name)
        bucket = self.buckets[f]
        del bucket[bisect.bisect_left(bucket, item)]
        self.free[name] = f - gpus
        bisect.insort(self.buckets[f - gpus], item)

    def has(self, name: str, gpus: int) -> bool:
        return self.free.get(name, 0) >= gpus

    def best_fit(self, gpus: int) -> str | None:
        for f in range(gpus, len(self.buckets)):
            if self.buckets[f]:
                return self.buckets[f][0][1]
        return None

    def fit_within(self, gpus: int, allowed: frozenset[str]) -> list[NodeSlice] | None:
        """Best fit, else fewest nodes, among ``allowed`` nodes only (a job whose own
        request rules out the others); None when they have too few GPUs free."""
        mine = sorted((f, self.order[n], n) for n in allowed if (f := self.free.get(n, 0)) > 0)
        for f, _, name in mine:
            if f >= gpus:
                return [NodeSlice(name, gpus)]
        return _fill(gpus, ((f, name) for f, _, name in sorted(mine, key=lambda x: (-x[0], x[1]))))

    def fit_layout(
        self,
        count: int,
        per_node: int,
        allowed: frozenset[str] | None,
        prefer: frozenset[str] | None,
    ) -> list[NodeSlice] | None:
        """``count`` distinct nodes with ``per_node`` GPUs free each (a job whose request
        fixes its node count), best fit per node, its preferred nodes first, within
        ``allowed`` (None: any); None when too few nodes have that much free."""
        names: list[str] = []
        if allowed is None and prefer is None:
            for f in range(per_node, len(self.buckets)):
                for _, name in self.buckets[f]:
                    names.append(name)
                    if len(names) == count:
                        return [NodeSlice(n, per_node) for n in names]
            return None
        among = self.free if allowed is None else allowed
        wished = prefer or frozenset()
        mine = sorted(
            (n not in wished, f, self.order[n], n)
            for n in among
            if (f := self.free.get(n, 0)) >= per_node
        )
        if len(mine) < count:
            return None
        return [NodeSlice(n, per_node) for *_, n in mine[:count]]

    def spread(self, gpus: int) -> list[NodeSlice] | None:
        """Fewest nodes: the nodes with the most free GPUs first."""
        return _fill(
            gpus,
            ((f, name) for f in range(len(self.buckets) - 1, 0, -1) for _, name in self.buckets[f]),
        )


def _fill(gpus: int, nodes: Iterable[tuple[int, str]]) -> list[NodeSlice] | None:
    """``gpus`` taken from ``nodes`` (free GPUs, name) in their order, each node's free
    GPUs or what is still needed; None when they run out first."""
    parts: list[NodeSlice] = []
    need = gpus
    for f, name in nodes:
        take = min(need, f)
        parts.append(NodeSlice(name, take))
        need -= take
        if need == 0:
            return parts
    return None


def _pools(nodes: Iterable[Node]) -> dict[GpuType, _FreePool]:
    """A free pool per GPU type, nodes added in snapshot order."""
    pools: dict[GpuType, _FreePool] = {}
    for i, n in enumerate(nodes):
        usable = n.usable_gpus
        if usable > 0:
            pool = pools.get(n.gpu_type)
            if pool is None:
                pool = pools[n.gpu_type] = _FreePool()
            pool.add(n.name, usable, i)
    return pools


def place_chosen(
    chosen: list[tuple[str, tuple[JobId, ...], GpuType]],
    jobs: Mapping[JobId, PlacedJob],
    nodes: Iterable[Node],
) -> dict[JobId, JobPlacement]:
    """Nodes for the chosen (key, members, type) triples, given in priority order (see
    the module docstring); every job of them that gets nodes, with its placement."""
    pools = _pools(nodes)

    out: dict[JobId, JobPlacement] = {}
    rest: list[
        tuple[
            int,
            str,
            tuple[JobId, ...],
            GpuType,
            frozenset[str] | None,
            frozenset[str] | None,
            int | None,
        ]
    ] = []
    # 1. lease extension: an entry on the type it already runs on, with its previous
    #    nodes still free, stays exactly where it is.
    for key, members, gpu_type in chosen:
        first = members[0]
        job = jobs[first]
        cur = job.current
        if len(members) == 1:  # (what _allowed and _node_count give for one job)
            allowed, prefer = job.nodes, job.prefer
            count = None if job.node_count is None else _node_count(members, jobs)
        else:
            allowed, prefer = _allowed(members, jobs), None
            count = _node_count(members, jobs)
        if count == 0:
            continue  # its GPUs cannot be laid out as its request asks: it waits
        if cur is not None and cur.gpu_type == gpu_type:
            pool = pools.get(gpu_type)
            partner = members[1] if len(members) == 2 else None
            if (
                pool is not None
                and cur.partner == partner
                and slices_fit(cur.nodes, pool.free)
                and (allowed is None or all(sl.node in allowed for sl in cur.nodes))
                and (count is None or _laid_out(cur.nodes, count, job.scale_factor))
            ):
                for sl in cur.nodes:
                    pool.take(sl.node, sl.gpus)
                if partner is None and cur.job_id == first:
                    out[first] = cur  # the same value a new JobPlacement would have (frozen)
                    continue
                for j in members:
                    out[j] = JobPlacement(
                        j, gpu_type, cur.nodes, _partner(members, j), cur.consolidated
                    )
                continue
        rest.append((-job.scale_factor, key, members, gpu_type, allowed, prefer, count))
    # 2. the rest, largest first (Gavel assigns in decreasing scale factor to limit
    #    fragmentation); ties keep priority order (the sort is stable).
    rest.sort(key=itemgetter(0))
    for neg_sf, key, members, gpu_type, allowed, prefer, count in rest:
        sf = -neg_sf
        pool = pools[gpu_type]
        slices: tuple[NodeSlice, ...]
        if count is not None:
            # its request fixes its nodes: exactly that many, or it waits this round
            laid = pool.fit_layout(count, sf // count, allowed, prefer)
            if laid is None:
                continue
            for sl in laid:
                pool.take(sl.node, sl.gpus)
            for j in members:
                out[j] = JobPlacement(j, gpu_type, tuple(laid), _partner(members, j), True)
            continue
        wished = pool.fit_within(sf, prefer) if prefer is not None else None
        best = None if allowed is not None or wished else pool.best_fit(sf)  # big holes
        if wished:  # --prefer: its preferred nodes (within the allowed ones) first
            slices = tuple(wished)
        elif allowed is not None:
            # Its own request rules out some nodes (select() counted GPUs per type
            # only): where its nodes have too few free, it waits this round.
            within = pool.fit_within(sf, allowed)
            if within is None:
                continue
            slices = tuple(within)
        elif best is not None:
            slices = (NodeSlice(best, sf),)
        else:
            spread = pool.spread(sf)
            if spread is None:  # select() checked totals, so only a caller bug lands here
                raise RuntimeError(f"no room for {key} on {gpu_type}: select() out of sync")
            slices = tuple(spread)
        for sl in slices:
            pool.take(sl.node, sl.gpus)
        consolidated = len(slices) <= math.ceil(sf / max(1, pool.biggest))
        for j in members:
            out[j] = JobPlacement(j, gpu_type, slices, _partner(members, j), consolidated)
    return out


def _allowed(members: tuple[JobId, ...], jobs: Mapping[JobId, PlacedJob]) -> frozenset[str] | None:
    """The nodes every member may use (None: any)."""
    out: frozenset[str] | None = None
    for j in members:
        nodes = jobs[j].nodes
        if nodes is not None:
            out = nodes if out is None else out & nodes
    return out


def _node_count(members: tuple[JobId, ...], jobs: Mapping[JobId, PlacedJob]) -> int | None:
    """The node count the entry's request fixes (None: any layout); 0 when none can be
    kept: a count that does not divide its GPUs, or pair members that ask different
    ones."""
    counts = {jobs[j].node_count for j in members}
    if len(counts) != 1:
        return 0
    count = counts.pop()
    if count is None:
        return None
    sf = jobs[members[0]].scale_factor
    if count < 1 or sf % count:
        return 0
    return count


def _laid_out(slices: tuple[NodeSlice, ...], count: int, gpus: int) -> bool:
    """The slices are ``count`` distinct nodes with the same share of ``gpus`` each."""
    per = gpus // count
    return (
        len(slices) == count
        and len({s.node for s in slices}) == count
        and all(s.gpus == per for s in slices)
    )


def _partner(members: tuple[JobId, ...], j: JobId) -> JobId | None:
    if len(members) != 2:
        return None
    return members[1] if members[0] == j else members[0]
