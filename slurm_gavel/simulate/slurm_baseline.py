"""Slurm as most sites run it, as a pseudo-policy for the simulator: `slurm_fifo`.

* FIFO by priority: priority weight (a QOS) first, then submission time.
* Whole-job allocation, no preemption: a started job keeps its GPUs to the end.
* Heterogeneity-blind: a job asks for "any GPU" (`--gpus=N`) and takes the first
  free ones in node order, on one GPU type; `slurm_fifo_pinned` instead pins
  every job to the type its user would request, the job type's fastest one.
  A job never goes to a type it cannot run on (throughput 0).
* Multi-GPU jobs take one node when one has room, else spread over nodes of
  one type in node order (Slurm's default block/linear selection); then the
  unconsolidated throughput applies.
* EASY backfill: the first job that does not fit gets a reservation at the
  earliest time enough GPUs of a type free up; later jobs may start now if they
  finish before it or leave enough GPUs of the reserved type. Run times are
  estimated from the throughput table, i.e. perfect time limits, which flatters
  Slurm compared with real user estimates.

The engine runs this baseline event-driven (a round on every arrival and
completion), as Slurm's scheduler reacts to events rather than rounds.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from slurm_gavel.core.round_config import BaselineFn, SchedulerConfig
from slurm_gavel.domain.cluster_model import ClusterSnapshot, JobPlacement, JobState, NodeSlice
from slurm_gavel.domain.model import GpuType, Job, JobId
from slurm_gavel.domain.throughputs import ThroughputError, ThroughputTable


@dataclass(frozen=True)
class _Reservation:
    time: float
    gpu_type: GpuType
    gpus_free_then: int  # GPUs of that type free at `time`, before the reserved job
    gpus_needed: int


def _rate(table: ThroughputTable, job: Job, gpu: GpuType, consolidated: bool) -> float:
    return table.throughput(job.job_type, job.scale_factor, gpu, consolidated=consolidated)


def _fit(
    job: Job,
    types: list[GpuType],
    free: Mapping[str, int],
    node_order: list[tuple[str, GpuType, int]],
) -> tuple[GpuType, tuple[NodeSlice, ...], bool] | None:
    """First free GPUs in node order: one node if any has room, else one type's nodes."""
    sf = job.scale_factor
    for name, t, _ in node_order:
        if t in types and free[name] >= sf:
            return t, (NodeSlice(name, sf),), True
    for t in dict.fromkeys(t for _, t, _ in node_order):
        if t not in types:
            continue
        names = [n for n, nt, _ in node_order if nt == t and free[n] > 0]
        if sum(free[n] for n in names) < sf:
            continue
        need, parts = sf, []
        for n in names:
            take = min(need, free[n])
            parts.append(NodeSlice(n, take))
            need -= take
            if need == 0:
                break
        biggest = max(g for _, nt, g in node_order if nt == t)
        return t, tuple(parts), len(parts) <= math.ceil(sf / biggest)
    return None


def _placement(
    snap: ClusterSnapshot, table: ThroughputTable, pinned: bool
) -> dict[JobId, JobPlacement]:
    node_order = [(n.name, n.gpu_type, n.usable_gpus) for n in snap.nodes if n.usable_gpus > 0]
    free = {name: g for name, _, g in node_order}
    biggest: dict[GpuType, int] = {}
    total: dict[GpuType, int] = {}  # usable GPUs per type
    for _, t, g in node_order:
        biggest[t] = max(biggest.get(t, 0), g)
        total[t] = total.get(t, 0) + g
    out: dict[JobId, JobPlacement] = {}
    ends: list[tuple[float, GpuType, int]] = []  # running jobs: expected end, type, GPUs
    now = snap.time
    for o in snap.jobs:
        if o.state is not JobState.RUNNING or o.gpu_type is None:
            continue
        consolidated = len(o.nodes) <= math.ceil(
            o.job.scale_factor / max(1, biggest.get(o.gpu_type, 1))
        )
        out[o.job.id] = JobPlacement(o.job.id, o.gpu_type, o.nodes, None, consolidated)
        for s in o.nodes:
            if s.node in free:
                free[s.node] -= s.gpus
        rate = _rate(table, o.job, o.gpu_type, consolidated)
        left = max(0.0, o.job.total_steps - (o.steps_done or 0.0))
        ends.append((now + left / rate if rate > 0 else math.inf, o.gpu_type, o.job.scale_factor))
    ends.sort()
    # Free GPUs per type: _fit finds room for a job iff one of its types has at least
    # its GPUs free in total, so the (long, when overloaded) queue is walked cheaply.
    free_by_type = dict.fromkeys(total, 0)
    for name, t, _ in node_order:
        free_by_type[t] += max(0, free[name])  # as _fit counts: only nodes with room
    free_total = sum(free_by_type.values())
    queue = sorted(
        (o.job for o in snap.jobs if o.state in (JobState.PENDING, JobState.HELD)),
        key=lambda j: (-j.priority_weight, j.arrival_time, j.id),
    )
    reservation: _Reservation | None = None
    for job in queue:
        if free_total <= 0:
            break  # no later job can start; the reservation only guards starts
        try:
            row = table.row(job.job_type, job.scale_factor)
        except ThroughputError:  # unknown type: Slurm would run it, we cannot model it
            continue
        types = [t for t in biggest if row.get(t, 0.0) > 0]
        if pinned and types:
            types = [max(types, key=lambda t: row[t])]
        sf = job.scale_factor
        if not types or sf > max(total[t] for t in types):
            continue  # can never run here
        room = False
        for t in types:
            if free_by_type[t] >= sf:
                room = True
                break
        fit = _fit(job, types, free, node_order) if room else None
        if fit is None:
            if reservation is None:
                reservation = _reserve(job, types, free_by_type, ends)
            continue
        t, slices, consolidated = fit
        if reservation is not None and t == reservation.gpu_type:
            rate = _rate(table, job, t, consolidated)
            end = now + job.total_steps / rate if rate > 0 else math.inf
            leaves = reservation.gpus_free_then - job.scale_factor >= reservation.gpus_needed
            if end > reservation.time and not leaves:
                continue  # would delay the reserved job
            if end > reservation.time:
                reservation = _Reservation(
                    reservation.time,
                    reservation.gpu_type,
                    reservation.gpus_free_then - job.scale_factor,
                    reservation.gpus_needed,
                )
        for s in slices:
            free[s.node] -= s.gpus
        free_by_type[t] -= sf
        free_total -= sf
        out[job.id] = JobPlacement(job.id, t, slices, None, consolidated)
    return out


def _reserve(
    job: Job,
    types: list[GpuType],
    free_by_type: Mapping[GpuType, int],
    ends: list[tuple[float, GpuType, int]],
) -> _Reservation | None:
    """Earliest time some allowed type has the job's GPUs free, as running jobs end.
    `free_by_type`: _placement's count (a node shrunk under its jobs offers none)."""
    avail = {t: free_by_type[t] for t in types}
    for end, t, gpus in ends:
        if t not in avail:
            continue
        avail[t] += gpus
        if avail[t] >= job.scale_factor and end < math.inf:
            return _Reservation(end, t, avail[t], job.scale_factor)
    return None


def slurm_fifo(snap: ClusterSnapshot, config: SchedulerConfig) -> dict[JobId, JobPlacement]:
    return _placement(snap, config.table, pinned=False)


def slurm_fifo_pinned(snap: ClusterSnapshot, config: SchedulerConfig) -> dict[JobId, JobPlacement]:
    return _placement(snap, config.table, pinned=True)


# The simulator's pseudo-policies by name: the engine hands the one simulated to the
# round as SchedulerConfig.baseline, the simulate command lists them beside the policies.
BASELINES: dict[str, BaselineFn] = {
    "slurm_fifo": slurm_fifo,
    "slurm_fifo_pinned": slurm_fifo_pinned,
}
