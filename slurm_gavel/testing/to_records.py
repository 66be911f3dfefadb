"""The fake Slurm's nodes and jobs as the real transports return them: the same
SlurmNode and SlurmJob records (backends/slurm/records.py), field by field as the
contract tests (tests/backends/slurm/contract/) pin them on each real release."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from slurm_gavel.backends.slurm.fit import JobNeeds
from slurm_gavel.backends.slurm.records import GpuSlice, SlurmJob, SlurmNode
from slurm_gavel.testing.fakes import FakeJob, FakeNode
from slurm_gavel.testing.timeline import Scheduler


def node_record(node: FakeNode, scheduler: Scheduler) -> SlurmNode:
    gpus, cpus, mem = scheduler.node_use(node)
    if node.down:
        state = "down"
    elif cpus == 0:
        state = "idle"
    else:
        state = "allocated" if cpus >= node.cpus else "mixed"
    return SlurmNode(
        name=node.name,
        state=state,
        flags=frozenset({"DRAIN"} if node.drain else set()),
        gpu_type=node.gpu_type,
        gpus=node.gpus,
        gpus_used=gpus,
        partitions=node.partitions,
        reason=node.reason,
        slurmd_start_time=node.slurmd_start_time,
        features=node.features,
        memory_mb=node.memory_mb,
        memory_used_mb=mem,
        cpus=node.cpus,
        cpus_used=cpus,
    )


def job_record(job: FakeJob, nodes: dict[str, FakeNode], def_mem_per_cpu_mb: int) -> SlurmJob:
    """One record as squeue's JSON gives it: a split task with its task_id (the backend's
    arrays.expand_tasks renames it), an ended job with the nodes it ran on."""
    running = job.state == "RUNNING"
    slices = tuple(GpuSlice(a.node, nodes[a.node].gpu_type, a.gpus) for a in job.alloc)
    if running:
        shown_nodes = tuple(a.node for a in job.alloc)
    elif job.state in ("PENDING", "SPECIAL_EXIT"):
        shown_nodes = ()
    else:
        shown_nodes = job.nodes_ran
    return SlurmJob(
        job_id=str(job.number),
        state=job.state,
        reason=job.reason,
        comment=job.comment,
        partitions=job.partitions,
        nodes=shown_nodes,
        gpu_request=job.gres,
        gpu_slices=slices,
        node_count=job.node_count,
        priority=job.priority,
        restarts=job.restarts,
        submit_time=job.submit_time,
        start_time=job.start_time,
        end_time=job.end_time,
        exit_code=job.exit_code,
        exit_signal=job.exit_signal,
        account=job.account,
        user=job.user,
        gpu_request_total=job.gres_total,
        user_id=job.user_id,
        eligible_time=job.eligible_time,
        shard_request=job.shards,
        dependency=",".join(f"{k}:{t}({s})" for k, t, s in job.dependency),
        task_id=job.name if job.task is not None else "",
        needs=JobNeeds(
            features=job.constraint,
            excluded=job.excluded,
            memory_per_node_mb=job.mem_per_node_mb,
            memory_per_cpu_mb=0 if job.mem_per_node_mb else def_mem_per_cpu_mb,
            cpus_per_node=job.cpus,
        ),
    )


def job_records(
    jobs: Iterable[FakeJob], nodes: dict[str, FakeNode], def_mem_per_cpu_mb: int
) -> list[SlurmJob]:
    """The records of these jobs: an array's pending tasks that no command named alone
    stay in one meta record (job_id the array's, array_tasks their ids), as in Slurm."""
    out: list[SlurmJob] = []
    metas: dict[int, list[FakeJob]] = {}
    for j in jobs:
        if j.task is not None and not j.split:
            metas.setdefault(j.array_id, []).append(j)
        else:
            out.append(job_record(j, nodes, def_mem_per_cpu_mb))
    for array_id, tasks in metas.items():
        first = job_record(tasks[0], nodes, def_mem_per_cpu_mb)
        out.append(
            replace(
                first, job_id=str(array_id), task_id="", array_tasks=tuple(t.name for t in tasks)
            )
        )
    return out
