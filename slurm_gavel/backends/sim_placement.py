"""Which of a round's placements a simulated cluster carries out (SimulatedCluster.act).

The checks a real cluster makes: the job is active, the GPU count is one it runs at,
the nodes are of the placement's type and have the GPUs free. Everything else in a
placement is the scheduler's to decide.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from slurm_gavel.domain.cluster_model import JobPlacement, NodeSlice, slices_fit
from slurm_gavel.domain.model import GpuType, Job, JobId


class _Active(Protocol):
    """What validate reads of an active simulated job (simulated._SimJob)."""

    job: Job
    placement: JobPlacement | None


def all_of_type(
    slices: tuple[NodeSlice, ...], node_type: Mapping[str, GpuType], t: GpuType
) -> bool:
    """Every slice is on a node of GPU type t."""
    for sl in slices:  # noqa: SIM110 - as cluster_model.slices_fit
        if node_type.get(sl.node) != t:
            return False
    return True


def validate(
    jobs: Mapping[JobId, JobPlacement],
    active: Mapping[JobId, _Active],
    usable: Mapping[str, int],
    node_type: Mapping[str, GpuType],
    failed: list[tuple[JobId, str]],
) -> dict[JobId, JobPlacement]:
    """The placements the cluster carries out, in job-id order; the others go to
    ``failed`` with the reason: not an active job, a GPU count the job cannot run at,
    nodes of another type, not enough free GPUs (``usable``: GPUs per node). A pair
    whose partner failed runs alone. A job's current placement object (kept) passed
    the count and type checks when it was first acted on."""
    free = dict(usable)
    counted: set[JobId] = set()
    ok: dict[JobId, JobPlacement] = {}
    for job_id in sorted(jobs):
        p = jobs[job_id]
        sj = active.get(job_id)
        if sj is None:
            failed.append((job_id, "not an active job"))
            continue
        slices = p.nodes
        # the placement it runs on (kept) passed these two when it was first acted on
        if p is not sj.placement:
            if not _count_ok(sj.job, p.gpus):
                failed.append((job_id, f"placed on {p.gpus} GPUs, needs {_needs(sj.job)}"))
                continue
            if not all_of_type(slices, node_type, p.gpu_type):
                failed.append((job_id, f"nodes are not all {p.gpu_type}"))
                continue
        if p.partner is not None and p.partner in counted:
            ok[job_id] = p  # its partner already holds these GPUs
            continue
        if not slices_fit(slices, free):
            failed.append((job_id, "not enough free GPUs on its nodes"))
            continue
        for sl in slices:
            free[sl.node] -= sl.gpus
        counted.add(job_id)
        ok[job_id] = p
    # a pair whose partner failed runs alone
    for job_id, p in list(ok.items()):
        if p.partner is not None and p.partner not in ok:
            ok[job_id] = JobPlacement(job_id, p.gpu_type, p.nodes, None, p.consolidated)
    return ok


def _count_ok(job: Job, gpus: int) -> bool:
    """A placement's GPU count fits the job: its scale factor, or within its range."""
    r = job.scale_range
    return gpus == job.scale_factor if r is None else r[0] <= gpus <= r[1]


def _needs(job: Job) -> str:
    r = job.scale_range
    return str(job.scale_factor) if r is None else f"{r[0]}-{r[1]}"


__all__ = ["all_of_type", "validate"]
