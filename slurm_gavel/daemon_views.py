"""Pure helpers of the daemon: dry-run plans, GPU type renaming, the status view.

No I/O: the daemon calls these on the snapshot and placement of a round.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from slurm_gavel.backends.base import (
    ActResult,
    ClusterSnapshot,
    JobPlacement,
    JobState,
    RoundPlacement,
)
from slurm_gavel.config import Config
from slurm_gavel.scheduler import RoundReport


def planned_actions(snap: ClusterSnapshot, placement: RoundPlacement) -> ActResult:
    """What act() would do to make `snap` match `placement` (for --dry-run)."""
    running = {
        o.job.id: JobPlacement(o.job.id, o.gpu_type, o.nodes, o.partner)
        for o in snap.jobs
        if o.state is JobState.RUNNING and o.gpu_type is not None
    }
    started, kept, moved = [], [], []
    for job_id, p in sorted(placement.jobs.items()):
        if job_id not in running:
            started.append(job_id)
        elif p.same_place(running[job_id]):
            kept.append(job_id)
        else:
            moved.append(job_id)
    preempted = sorted(j for j in running if j not in placement.jobs)
    return ActResult(tuple(started), tuple(kept), tuple(preempted), tuple(moved))


def rename_gpu_types(snap: ClusterSnapshot, names: Mapping[str, str]) -> ClusterSnapshot:
    """Slurm's GRES type names -> the throughput table's (config key gpu_types)."""

    def name(t: str | None) -> str | None:
        return None if t is None else names.get(t, t)

    return replace(
        snap,
        nodes=tuple(replace(n, gpu_type=name(n.gpu_type)) for n in snap.nodes),
        jobs=tuple(replace(o, gpu_type=name(o.gpu_type)) for o in snap.jobs),
    )


def jobs_view(
    snap: ClusterSnapshot | None, placed: dict[str, JobPlacement] | None
) -> dict[str, dict[str, Any]]:
    """What `slurm-gavel status` shows that the scheduler state does not hold.

    `placed` is the round's placement once it has acted: placed jobs run there now,
    running jobs left out are being checkpointed ("preempted") and will be held.
    """
    if snap is None:
        return {}
    out: dict[str, dict[str, Any]] = {}
    for o in snap.jobs:
        if o.state is JobState.DONE:
            continue
        state, gpu_type, nodes = o.state.value, o.gpu_type, o.nodes
        if placed is not None:
            p = placed.get(o.job.id)
            if p is not None:
                # "starting" until an observe shows it running there (Slurm may lag).
                running_there = o.state is JobState.RUNNING and p.same_place(
                    JobPlacement(o.job.id, o.gpu_type or "", o.nodes, o.partner)
                )
                state = "running" if running_there else "starting"
                gpu_type, nodes = p.gpu_type, p.nodes
            elif o.state is JobState.RUNNING:
                state, gpu_type, nodes = "preempted", None, ()
        out[o.job.id] = {
            "job_type": o.job.job_type,
            "scale_factor": o.job.scale_factor,
            "state": state,
            "restarts": o.restarts,
            "steps_done": o.steps_done,
            "total_steps": o.job.total_steps,
            "account": o.job.account,
            "gpu_type": gpu_type,
            "nodes": [[s.node, s.gpus] for s in nodes],
        }
    return out


def cluster_view(snap: ClusterSnapshot | None) -> dict[str, Any]:
    if snap is None:
        return {}
    return {
        "time": snap.time,
        "capacity": snap.capacity(),
        "nodes": [
            {
                "name": n.name,
                "gpu_type": n.gpu_type,
                "gpus": n.gpus,
                "state": n.state.value,
                "usable": n.usable_gpus,
            }
            for n in snap.nodes
        ],
    }


def format_plan(report: RoundReport, config: Config) -> str:
    """The dry-run output: one line per action the round would take."""
    r, jobs = report.result, report.placement.jobs
    lines = [f"round {report.round_index} (dry run, nothing sent to Slurm):"]

    def where(j: str) -> str:
        p = jobs[j]
        return f"{p.gpu_type} on " + ",".join(f"{s.node}:{s.gpus}" for s in p.nodes)

    lines += [f"  start    {j}  {where(j)}" for j in r.started]
    lines += [f"  move     {j}  to {where(j)}" for j in r.moved]
    lines += [
        f"  preempt  {j}  (SIG{config.checkpoint.signal}, "
        f"{config.checkpoint.grace_seconds:g} s grace, then requeue-hold)"
        for j in r.preempted
    ]
    lines += [f"  keep     {j}  {where(j)}" for j in r.kept]
    if len(lines) == 1:
        lines.append("  nothing to do")
    return "\n".join(lines) + "\n"
