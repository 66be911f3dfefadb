"""What `slurm-gavel run --dry-run` does instead of acting: the actions a round would
take (planned_actions, the tap's act() in a dry run) and the lines it prints for them
(format_plan). Pure functions of the round's snapshot, placement and report.
"""

from __future__ import annotations

from slurm_gavel.core.round_report import RoundReport
from slurm_gavel.daemon.config_types import Config
from slurm_gavel.domain.cluster_model import (
    ActResult,
    ClusterSnapshot,
    JobPlacement,
    JobState,
    RoundPlacement,
)


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
