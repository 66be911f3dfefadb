"""Pure helpers of the daemon: dry-run plans, GPU type renaming, the status view,
the inflight record, error classification.

No I/O: the daemon calls these on the snapshot and placement of a round.
"""

from __future__ import annotations

import os
import pwd
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from slurm_gavel.core.cluster_model import (
    ActResult,
    ClusterSnapshot,
    JobPlacement,
    JobState,
    NodeSlice,
    NodeState,
    ObservedJob,
    RoundPlacement,
)
from slurm_gavel.core.model import JobId
from slurm_gavel.core.round_types import RoundReport
from slurm_gavel.core.throughputs import ThroughputTable
from slurm_gavel.daemon.config_types import Config


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
        nodes=tuple(replace(n, gpu_type=names.get(n.gpu_type, n.gpu_type)) for n in snap.nodes),
        jobs=tuple(replace(o, gpu_type=name(o.gpu_type)) for o in snap.jobs),
    )


def jobs_view(
    snap: ClusterSnapshot | None,
    report: RoundReport | None,
    table: ThroughputTable | None = None,
    previous: RoundReport | None = None,
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
    for the seconds the round acts.
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
            state, reason = "skipped", skipped[o.job.id]
        if o.job.id in failed:
            reason = failed[o.job.id]
        cells = unmeasured.get((o.job.job_type, o.job.scale_factor), {})
        out[o.job.id] = _job_row(o, state, gpu_type, nodes, reason, cells)
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


@dataclass(frozen=True)
class Inflight:
    """A round that was about to act when the state was saved."""

    round_index: int
    time: float
    placement: dict[str, JobPlacement]

    def to_json(self) -> dict[str, Any]:
        return {
            "round_index": self.round_index,
            "time": self.time,
            "placement": {j: p.to_json() for j, p in self.placement.items()},
        }

    @staticmethod
    def from_json(d: dict[str, Any]) -> Inflight:
        return Inflight(
            int(d["round_index"]),
            float(d["time"]),
            {str(j): JobPlacement.from_json(p) for j, p in d["placement"].items()},
        )


def is_slurm_unavailable(e: BaseException) -> bool:
    from slurm_gavel.backends.slurm.cli.commands import SlurmUnreachable

    # Not every OSError: the backends turn their own (a missing command, a refused
    # connection) into SlurmUnreachable, so a bare OSError here is a local file (the
    # state, the spool) and must not be reported, or settled on, as a Slurm outage.
    return isinstance(
        e, SlurmUnreachable | subprocess.SubprocessError | TimeoutError | ConnectionError
    )


def failed_command(e: BaseException) -> str:
    """The Slurm command an error names first ("sinfo --json: ..." -> "sinfo")."""
    words = str(e).split()
    name = words[0].rstrip(":") if words else ""
    return name if name in ("sinfo", "squeue", "scontrol", "scancel") else "other"


def log_ids(ids: tuple[str, ...], limit: int = 50) -> str:
    """Job ids for a log line, at most `limit` of them."""
    more = f",+{len(ids) - limit}" if len(ids) > limit else ""
    return ",".join(ids[:limit]) + more


def commands_issued(backend: object) -> int | None:
    """Slurm commands the backend has run so far, if it counts them (retries included)."""
    n = getattr(backend, "commands_issued", None)
    return n if isinstance(n, int) else None


def checkpoint_waits(backend: object) -> dict[JobId, float]:
    """Seconds the backend's last act waited on each job it signalled (none where the
    backend does not wait, as the simulator's)."""
    waits = getattr(backend, "checkpoint_waits", None)
    return dict(waits) if isinstance(waits, dict) else {}


def running_as() -> str:
    """The account the daemon runs as, for the fixes its errors print."""
    try:
        return pwd.getpwuid(os.geteuid()).pw_name
    except KeyError:
        return f"uid {os.geteuid()}"
