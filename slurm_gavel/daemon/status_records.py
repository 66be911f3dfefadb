"""The rows `slurm-gavel status` shows that the scheduler state does not hold: each
job's state, place and reason in the round (jobs_view), and the cluster's nodes
(cluster_view), the state document's "jobs" and "cluster" (state_doc.py).

Pure functions of the round's snapshot and report: no I/O.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from slurm_gavel.core.round_report import RoundReport
from slurm_gavel.daemon.mold_view import MoldView
from slurm_gavel.domain.cluster_model import (
    ClusterSnapshot,
    JobPlacement,
    JobState,
    NodeSlice,
    NodeState,
    ObservedJob,
)
from slurm_gavel.domain.throughputs import ThroughputTable


def jobs_view(
    snap: ClusterSnapshot | None,
    report: RoundReport | None,
    table: ThroughputTable | None = None,
    previous: RoundReport | None = None,
    throughput_of: Callable[[ObservedJob], dict[str, dict[str, Any]] | None] | None = None,
    moldable_of: MoldView | None = None,
) -> dict[str, dict[str, Any]]:
    """What `slurm-gavel status` shows that the scheduler state does not hold.

    With the round's report (once it acted): placed jobs are "starting" there (or
    "running" when they already ran there), running jobs it preempted are
    "preempted" (checkpointing, then held), jobs it could not consider are
    "skipped" with the reason. Without one (mid-round save): what Slurm showed.
    With the ``table`` the round used, a job sharing GPUs says whether its pair cell
    is an estimate (learned from reports or derived, not measured). A mid-round save
    keeps the ``previous`` round's unmeasured marks: the table the round uses is the
    one they were made with, and a view without them would drop the status notes
    for the seconds the round acts. ``throughput_of`` gives each job's own row
    (daemon/row_view.py): {GPU type: steps/s, what backs it, seconds measured};
    ``moldable_of`` a moldable job's range, count and why (daemon/mold_view.py).
    """
    if snap is None:
        return {}
    placed = report.placement.jobs if report is not None else {}
    stopped = set(report.result.preempted) if report is not None else set()
    failed = dict(report.result.failed) if report is not None else {}
    skipped = dict(report.skipped) if report is not None else {}
    unmeasured: dict[tuple[str, int], dict[str, str]] = {}
    marks_from = report if report is not None else previous
    for jt, sf, gpu, mark in marks_from.unmeasured if marks_from is not None else ():
        unmeasured.setdefault((jt, sf), {})[gpu] = mark
    unresponsive = {n.name for n in snap.nodes if n.state is NodeState.NOT_RESPONDING}
    by_id = {o.job.id: o for o in snap.jobs}
    out: dict[str, dict[str, Any]] = {}
    for o in snap.jobs:
        if o.state is JobState.DONE:
            continue
        state, gpu_type, nodes, reason = o.state.value, o.gpu_type, o.nodes, None
        stuck = [s.node for s in o.nodes if s.node in unresponsive]
        if o.state is JobState.RUNNING and stuck:
            out[o.job.id] = _job_row(o, "kept", o.gpu_type, o.nodes, kept_reason(stuck), {})
            if moldable_of is not None:
                out[o.job.id]["moldable"] = moldable_of(o, "kept", o.nodes)
            continue
        p = placed.get(o.job.id)
        if p is not None and o.job.id not in failed:
            # "starting" until an observe shows it running there (Slurm may lag).
            here = JobPlacement(o.job.id, o.gpu_type or "", o.nodes, o.partner)
            state = "running" if o.state is JobState.RUNNING and p.same_place(here) else "starting"
            gpu_type, nodes = p.gpu_type, p.nodes
        elif o.job.id in stopped:
            state, gpu_type, nodes = "preempted", None, ()
        elif o.job.id in skipped:
            state, reason = "skipped", skipped[o.job.id].detail
        if o.job.id in failed:
            reason = failed[o.job.id]
        cells = unmeasured.get((o.job.job_type, o.job.scale_factor), {})
        out[o.job.id] = _job_row(o, state, gpu_type, nodes, reason, cells)
        if state == "skipped":
            out[o.job.id]["skip"] = skipped[o.job.id].code.value
        if throughput_of is not None:
            out[o.job.id]["throughput"] = throughput_of(o)
        if moldable_of is not None:
            out[o.job.id]["moldable"] = moldable_of(o, state, nodes)
        partner = p.partner if p is not None and o.job.id not in failed else o.partner
        mate = by_id.get(partner or "")
        if table is not None and mate is not None and gpu_type is not None:
            jt, pt, sf = o.job.job_type, mate.job.job_type, o.job.scale_factor
            if table.pair(jt, pt, sf, gpu_type) is not None:
                out[o.job.id]["pair_cell"] = {
                    "partner": mate.job.id,
                    "partner_type": pt,
                    "estimate": table.pair_is_estimate(jt, pt, sf, gpu_type),
                }
    return out


def kept_reason(nodes: list[str]) -> str:
    """Why a job on a node whose slurmd does not answer is neither moved nor preempted."""
    return (
        f"node {','.join(nodes)} not responding (slurmd unreachable): kept running there, "
        "not preempted (the checkpoint signal cannot reach it); Slurm requeues it if it "
        "declares the node DOWN, and the daemon places it again"
    )


def _job_row(
    o: ObservedJob,
    state: str,
    gpu_type: str | None,
    nodes: tuple[NodeSlice, ...],
    reason: str | None,
    unmeasured: dict[str, str],
) -> dict[str, Any]:
    return {
        "job_type": o.job.job_type,
        "scale_factor": o.job.scale_factor,
        "state": state,
        "reason": reason,
        "restarts": o.restarts,
        "steps_done": o.steps_done,
        "total_steps": o.job.total_steps,
        "account": o.job.account,
        "user": o.job.user,
        "user_id": o.user_id,
        "partition": o.job.partition,
        "gpu_type": gpu_type,
        "nodes": [[s.node, s.gpus] for s in nodes],
        # GPU types whose figure for this job is not measured (cluster_rows.py)
        "unmeasured": unmeasured,
    }


def cluster_view(snap: ClusterSnapshot | None) -> dict[str, Any]:
    """The cluster's capacity and nodes as the round observed them ({} before any)."""
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
                "partition": n.partition,
                "state": n.state.value,
                "usable": n.usable_gpus,
            }
            for n in snap.nodes
        ],
    }
