"""The values of the daemon's per-(GPU type, partition) and per-account series, from
one round's snapshot and report (daemon/metrics.py sets them). Pure: no registry, no
I/O, no clock, so each is tested by hand against a snapshot.
"""

from __future__ import annotations

from collections import Counter as Tally
from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # only for annotations: the metrics modules stay import-light
    from slurm_gavel.core.round_report import RoundReport
    from slurm_gavel.domain.cluster_model import ClusterSnapshot
    from slurm_gavel.domain.model import Allocation, JobId

GpuKey = tuple[str, str]  # (gpu_type, partition)


def gpu_counts(
    snap: ClusterSnapshot,
) -> tuple[dict[GpuKey, int], dict[GpuKey, int], dict[GpuKey, int]]:
    """Total, allocated and idle GPUs per (GPU type, partition) of one snapshot."""
    running = {o.job.id: o for o in snap.jobs if o.state.value == "running"}
    held: Tally[str] = Tally()
    for o in running.values():
        # A space-shared pair runs on the same GPUs: count them under one job only.
        if o.partner is not None and o.partner in running and str(o.partner) < str(o.job.id):
            continue
        for sl in o.nodes:
            held[sl.node] += sl.gpus
    total: dict[GpuKey, int] = {}
    alloc: dict[GpuKey, int] = {}
    idle: dict[GpuKey, int] = {}
    for n in snap.nodes:
        key = (str(n.gpu_type), n.partition)
        used = min(n.gpus, n.gpus_held_unmanaged + held[n.name])
        total[key] = total.get(key, 0) + n.gpus
        alloc[key] = alloc.get(key, 0) + used
        free = n.gpus - used if n.state.value == "up" else 0
        idle[key] = idle.get(key, 0) + free
    return total, alloc, idle


def account_shares(
    allocation: Allocation | None, snap: ClusterSnapshot
) -> dict[tuple[str, str], float]:
    """GPUs per (account, GPU type) the allocation gives the snapshot's active jobs.

    A job's fraction of time on a type times its GPUs is the GPUs it gets there on
    average; a space-shared pair occupies one job's GPUs, so each member counts half
    of them. Jobs the allocation names but the snapshot no longer has are skipped."""
    out: dict[tuple[str, str], float] = {}
    if allocation is None:
        return out
    jobs = {o.job.id: o.job for o in snap.jobs if o.state.value != "done"}

    def add(job_id: JobId, fractions: Mapping[str, float], weight: float) -> None:
        job = jobs.get(job_id)
        if job is None:
            return
        for gpu_type, f in fractions.items():
            key = (job.account or "", str(gpu_type))
            out[key] = out.get(key, 0.0) + f * job.scale_factor * weight

    for job_id, fractions in allocation.fractions.items():
        add(job_id, fractions, 1.0)
    for pair in allocation.pairs:
        for job_id in pair.jobs:
            add(job_id, pair.fractions, 0.5)
    return out


def account_received(
    report: RoundReport, snap: ClusterSnapshot
) -> dict[tuple[str, str, str], float]:
    """GPUs per (account, GPU type, partition) the round's placed jobs hold (those
    whose action failed hold nothing new); a space-shared GPU counts half per job."""
    failed = {j for j, _ in report.result.failed}
    accounts = {o.job.id: o.job.account or "" for o in snap.jobs}
    partition = {n.name: n.partition for n in snap.nodes}
    out: dict[tuple[str, str, str], float] = {}
    for p in report.placement.jobs.values():
        if p.job_id in failed:
            continue
        weight = 0.5 if p.partner is not None and p.partner not in failed else 1.0
        for sl in p.nodes:
            key = (accounts.get(p.job_id, ""), str(p.gpu_type), partition.get(sl.node, ""))
            out[key] = out.get(key, 0.0) + sl.gpus * weight
    return out
