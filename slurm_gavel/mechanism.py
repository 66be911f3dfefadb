"""The round mechanism: an allocation (fractions of time per GPU type) -> this round's placement.

Gavel's rule (scheduler.py, _update_priorities / _schedule_jobs_on_workers):

* priority(entry, type) = X[entry][type] / share of time the entry received on that
  type since the allocation was computed. An entry is a job or a space-sharing
  pair. Entries that never ran on a type they are allocated to have priority inf;
  entries with X = 0 on a type have priority 0 and only fill GPUs nobody with a
  positive priority wants (work conservation, as Gavel does). Ties break on the
  deficit (X * elapsed - received), then on X.
* Walk the (entry, type) list by priority; place an entry if none of its jobs is
  placed yet, its throughput there is > 0 and enough GPUs of the type are left.
* Then choose nodes per type: jobs placed on the type they already run on keep
  their nodes when those are still free (lease extension: no restart); the rest,
  largest first, go on the fewest nodes (best fit), and a job that has to spread
  is marked unconsolidated so the table's unconsolidated throughput applies.

Pure functions over plain data: no clock, no I/O, no randomness.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from slurm_gavel.backends.base import JobPlacement, Node, NodeSlice
from slurm_gavel.model import Allocation, GpuType, JobId

INF = math.inf


def pair_key(a: JobId, b: JobId) -> str:
    """Accounting key of a space-sharing pair (order-independent)."""
    x, y = sorted((a, b))
    return f"{x}+{y}"


@dataclass(frozen=True)
class MechanismJob:
    """What the mechanism needs to know about one job this round."""

    id: JobId
    scale_factor: int
    throughput: Mapping[GpuType, float]  # steps/s alone; <= 0 means it cannot run there
    current: JobPlacement | None = None  # where it runs now, if it runs


@dataclass(frozen=True)
class Entry:
    """One schedulable unit on one GPU type: a job, or a pair sharing GPUs."""

    key: str
    jobs: tuple[JobId, ...]
    gpu_type: GpuType
    fraction: float
    priority: float
    deficit: float


def entries(
    allocation: Allocation,
    jobs: Mapping[JobId, MechanismJob],
    received: Mapping[str, Mapping[GpuType, float]],
    elapsed: float,
    gpu_types: Iterable[GpuType],
    pair_ok: Mapping[str, frozenset[GpuType]] | None = None,
) -> list[Entry]:
    """All (entry, type) candidates with their priority, highest first.

    `received[key][type]` is the time the entry ran on the type since the
    allocation was computed and `elapsed` the wall time since then.
    """
    types = list(gpu_types)
    out: list[Entry] = []

    def make(key: str, members: tuple[JobId, ...], t: GpuType, x: float) -> Entry:
        got = received.get(key, {}).get(t, 0.0)
        if x <= 0.0:
            prio = 0.0
        elif got <= 0.0 or elapsed <= 0.0:
            prio = INF
        else:
            prio = x / (got / elapsed)
        return Entry(key, members, t, x, prio, x * elapsed - got)

    for job_id in sorted(jobs):
        row = allocation.fractions.get(job_id, {})
        job = jobs[job_id]
        for t in types:
            if job.throughput.get(t, 0.0) > 0.0:
                out.append(make(job_id, (job_id,), t, float(row.get(t, 0.0))))
    for pair in allocation.pairs:
        a, b = pair.jobs
        if a not in jobs or b not in jobs:
            continue
        key = pair_key(a, b)
        allowed = pair_ok.get(key) if pair_ok is not None else None
        for t, x in pair.fractions.items():
            if x > 0.0 and t in types and (allowed is None or t in allowed):
                out.append(make(key, (a, b), t, float(x)))

    def still_here(e: Entry) -> int:
        # Among equals, prefer the entry already running on this type: keeping it
        # avoids a restart and its overhead.
        cur = jobs[e.jobs[0]].current
        return 1 if cur is not None and cur.gpu_type == e.gpu_type else 0

    out.sort(
        key=lambda e: (-e.priority, -e.deficit, -e.fraction, -still_here(e), e.key, e.gpu_type)
    )
    return out


def select(
    ranked: list[Entry], jobs: Mapping[JobId, MechanismJob], capacity: Mapping[GpuType, int]
) -> list[Entry]:
    """Greedy pick in priority order: each job at most once, within GPUs per type."""
    left = dict(capacity)
    placed: set[JobId] = set()
    chosen: list[Entry] = []
    for e in ranked:
        if any(j in placed for j in e.jobs):
            continue
        sfs = {jobs[j].scale_factor for j in e.jobs}
        if len(sfs) != 1:
            continue  # Gavel only packs jobs of the same size
        sf = sfs.pop()
        if sf > left.get(e.gpu_type, 0):
            continue
        left[e.gpu_type] -= sf
        placed.update(e.jobs)
        chosen.append(e)
    return chosen


def place_on_nodes(
    chosen: list[Entry], jobs: Mapping[JobId, MechanismJob], nodes: Iterable[Node]
) -> dict[JobId, JobPlacement]:
    """Pick nodes for the chosen entries, type by type (see the module docstring)."""
    free: dict[str, int] = {}
    node_type: dict[str, GpuType] = {}
    node_order: list[str] = []
    for n in nodes:
        if n.usable_gpus > 0:
            free[n.name] = n.usable_gpus
            node_type[n.name] = n.gpu_type
            node_order.append(n.name)
    biggest: dict[GpuType, int] = {}
    for name in node_order:
        t = node_type[name]
        biggest[t] = max(biggest.get(t, 0), free[name])

    out: dict[JobId, JobPlacement] = {}
    rest: list[Entry] = []
    # 1. lease extension: an entry on the type it already runs on, with its previous
    #    nodes still free, stays exactly where it is.
    for e in chosen:
        cur = jobs[e.jobs[0]].current
        same = (
            cur is not None
            and cur.gpu_type == e.gpu_type
            and cur.partner == _other(e, e.jobs[0])
            and all(
                free.get(s.node, 0) >= s.gpus and node_type.get(s.node) == e.gpu_type
                for s in cur.nodes
            )
        )
        if same and cur is not None:
            for s in cur.nodes:
                free[s.node] -= s.gpus
            for j in e.jobs:
                out[j] = JobPlacement(j, e.gpu_type, cur.nodes, _other(e, j), cur.consolidated)
        else:
            rest.append(e)
    # 2. the rest, largest first (Gavel assigns in decreasing scale factor to limit
    #    fragmentation); ties keep priority order.
    rest.sort(key=lambda e: -jobs[e.jobs[0]].scale_factor)
    for e in rest:
        sf = jobs[e.jobs[0]].scale_factor
        candidates = [n for n in node_order if node_type[n] == e.gpu_type and free[n] > 0]
        fits = [n for n in candidates if free[n] >= sf]
        if fits:
            best = min(fits, key=lambda n: free[n])  # best fit keeps big holes for big jobs
            slices: tuple[NodeSlice, ...] = (NodeSlice(best, sf),)
        else:
            need = sf
            parts: list[NodeSlice] = []
            for n in sorted(candidates, key=lambda n: -free[n]):  # fewest nodes
                take = min(need, free[n])
                parts.append(NodeSlice(n, take))
                need -= take
                if need == 0:
                    break
            if need > 0:  # select() checked totals, so only a caller bug lands here
                raise RuntimeError(f"no room for {e.key} on {e.gpu_type}: select() out of sync")
            slices = tuple(parts)
        for s in slices:
            free[s.node] -= s.gpus
        fewest = math.ceil(sf / max(1, biggest.get(e.gpu_type, sf)))
        for j in e.jobs:
            out[j] = JobPlacement(j, e.gpu_type, slices, _other(e, j), len(slices) <= fewest)
    return out


def _other(e: Entry, j: JobId) -> JobId | None:
    if len(e.jobs) != 2:
        return None
    return e.jobs[1] if e.jobs[0] == j else e.jobs[0]


def assign(
    allocation: Allocation,
    jobs: Mapping[JobId, MechanismJob],
    nodes: Iterable[Node],
    received: Mapping[str, Mapping[GpuType, float]],
    elapsed: float,
    pair_ok: Mapping[str, frozenset[GpuType]] | None = None,
) -> dict[JobId, JobPlacement]:
    """This round's placement for every job that runs (absent jobs do not run)."""
    node_list = list(nodes)
    capacity: dict[GpuType, int] = {}
    for n in node_list:
        capacity[n.gpu_type] = capacity.get(n.gpu_type, 0) + n.usable_gpus
    ranked = entries(allocation, jobs, received, elapsed, capacity, pair_ok)
    chosen = select(ranked, jobs, capacity)
    return place_on_nodes(chosen, jobs, node_list)
