"""Pure halves of the Slurm backends: parsed Slurm state -> snapshot, placement -> plan.

Shared by SlurmCluster (CLI) and SlurmRestCluster (slurmrestd); no I/O here, so
both are tested on captured JSON without a cluster.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass, field, replace

from slurm_gavel.backends.slurm.records import SlurmJob, SlurmNode
from slurm_gavel.backends.slurm.shard_pairs import (
    RUNNING_STATES,
    AfterExit,
    StartOrder,
    defer_pairs_beside_leaving_shards,
    lone_half_warnings,
    lone_shard_holders,
    pair_on_shards,
    shard_partners,
    whole_gpu_as_shards,
)
from slurm_gavel.backends.slurm.shard_pairs import (
    managed_gpus as managed_gpus_of,
)
from slurm_gavel.core.cluster_model import (
    ClusterSnapshot,
    JobPlacement,
    JobState,
    Node,
    NodeSlice,
    ObservedJob,
    RoundPlacement,
)
from slurm_gavel.core.managed import ManagedCommentError, ManagedSpec, parse_comment
from slurm_gavel.core.model import Job, JobId

WAITING_STATES = {
    "PENDING",
    "REQUEUED",
    "REQUEUE_HOLD",
    "REQUEUE_FED",
    "SPECIAL_EXIT",
    "RESV_DEL_HOLD",
}
# Anything else (COMPLETED, FAILED, CANCELLED, TIMEOUT, NODE_FAIL, OUT_OF_MEMORY,
# BOOT_FAIL, DEADLINE, PREEMPTED, REVOKED) is finished.


@dataclass
class SlurmView:
    """One observation: the snapshot plus the raw Slurm records act() needs."""

    snapshot: ClusterSnapshot
    managed: dict[JobId, SlurmJob]  # managed jobs by id (all states)
    nodes: dict[str, SlurmNode]  # every node Slurm reported, by name
    warnings: list[str] = field(default_factory=list)


def is_managed_partition(parts: Iterable[str], managed: Collection[str] | None) -> bool:
    return managed is None or any(p in managed for p in parts)


def build_view(
    nodes: list[SlurmNode],
    jobs: list[SlurmJob],
    managed_partitions: Collection[str] | None,
    now: float,
    first_submit: dict[JobId, float] | None = None,
) -> SlurmView:
    """The snapshot the round loop sees; malformed managed comments become warnings.

    first_submit (updated in place) remembers each job's earliest submit time:
    Slurm 22.05 resets submit_time on every requeue, which would make a preempted
    job look younger than it is.
    """
    first_submit = {} if first_submit is None else first_submit
    warnings: list[str] = []
    managed: dict[JobId, SlurmJob] = {}
    observed: list[ObservedJob] = []
    specs: list[tuple[SlurmJob, ManagedSpec, float]] = []
    for sj in jobs:
        if not is_managed_partition(sj.partitions, managed_partitions):
            continue
        try:
            # No cap here: the daemon caps the user's weight to its configured
            # max_user_weight (slurm_gavel/core/shares.py) rather than drop the job.
            spec = parse_comment(sj.comment, job_id=sj.job_id, max_weight=None)
        except ManagedCommentError as e:
            warnings.append(f"{e} (left to Slurm, not managed)")
            continue
        if spec is None:
            continue
        managed[sj.job_id] = sj
        arrival = min(float(sj.submit_time), first_submit.get(sj.job_id, float("inf")))
        first_submit[sj.job_id] = arrival
        specs.append((sj, spec, arrival))
    partners = shard_partners(managed.values())
    by_name = {n.name: n for n in nodes}
    warnings += lone_half_warnings(managed, jobs, partners, by_name)
    types = {n.name: n.gpu_type for n in nodes}
    for sj, spec, arrival in specs:
        observed.append(_observed(sj, spec, arrival, partners.get(sj.job_id), types))
    for gone in [j for j in first_submit if j not in managed]:
        del first_submit[gone]
    managed_gpus = managed_gpus_of(managed.values())
    out_nodes: list[Node] = []
    for sn in nodes:
        if not is_managed_partition(sn.partitions, managed_partitions) or sn.gpus == 0:
            continue
        if sn.gpu_type is None:
            warnings.append(
                f"node {sn.name}: its GPUs have no type; add Type= to gres.conf "
                "and gpu:TYPE:N to slurm.conf (node ignored)"
            )
            continue
        state = sn.condition
        part = next(
            (p for p in sn.partitions if managed_partitions is None or p in managed_partitions), ""
        )
        out_nodes.append(
            Node(
                name=sn.name,
                gpu_type=sn.gpu_type,
                gpus=sn.gpus,
                partition=part,
                state=state,
                gpus_held_unmanaged=max(0, sn.gpus_used - managed_gpus.get(sn.name, 0)),
            )
        )
    snapshot = ClusterSnapshot(time=now, nodes=tuple(out_nodes), jobs=tuple(observed))
    return SlurmView(snapshot, managed, {n.name: n for n in nodes}, warnings)


def _observed(
    sj: SlurmJob,
    spec: ManagedSpec,
    arrival: float,
    partner: JobId | None = None,
    node_types: dict[str, str | None] | None = None,
) -> ObservedJob:
    scale = spec.scale_factor
    if scale is None and sj.gpu_request is not None:
        scale = sj.gpu_request[1] * max(1, sj.node_count)
    elif scale is None and sj.gpu_request_total is not None:  # sbatch --gpus=TYPE:N
        scale = sj.gpu_request_total[1]
    # The owner's uid from Slurm's record (squeue's user_id): progress reports must
    # be files of this uid (daemon/progress.py).
    uid = sj.user_id
    job = Job(
        id=sj.job_id,
        job_type=spec.job_type,
        scale_factor=scale or 1,
        priority_weight=spec.priority_weight,
        total_steps=spec.total_steps or 0.0,
        arrival_time=arrival,
        account=sj.account or None,
        slo=spec.slo,
        qos=sj.qos or None,  # the admin's weight for it: slurm_gavel/core/shares.py
        user=sj.user or None,
        partition=",".join(sj.partitions) or None,
    )
    if sj.state in RUNNING_STATES:
        slices = tuple(NodeSlice(s.node, s.gpus) for s in sj.gpu_slices)
        gpu_type = next((s.gpu_type for s in sj.gpu_slices if s.gpu_type), None)
        request = sj.gpu_request or sj.gpu_request_total
        if gpu_type is None and request is not None:
            gpu_type = request[0]
        if gpu_type is None and slices and node_types:  # shards name no GPU type
            gpu_type = node_types.get(slices[0].node)
        return ObservedJob(
            job=job,
            state=JobState.RUNNING,
            gpu_type=gpu_type,
            nodes=slices,
            partner=partner,
            restarts=sj.restarts,
            user_id=uid,
        )
    if sj.state in WAITING_STATES:
        held = sj.held and (sj.restarts > 0 or sj.state == "SPECIAL_EXIT")
        return ObservedJob(
            job=job,
            state=JobState.HELD if held else JobState.PENDING,
            restarts=sj.restarts,
            user_id=uid,
        )
    return ObservedJob(
        job=job,
        state=JobState.DONE,
        restarts=sj.restarts,
        finish_time=float(sj.end_time) if sj.end_time else None,
        succeeded=sj.state == "COMPLETED",
        user_id=uid,
    )


def add_vanished(view: SlurmView, active_before: dict[JobId, Job], now: float) -> None:
    """Report managed jobs that left squeue unseen as DONE (once), in place.

    squeue forgets a finished job after MinJobAge (300 s by default), less than a
    6-minute round: without this, a job finishing right after one observation would
    never be reported done. Success is unknown then, so it is reported failed with a
    warning telling the admin to raise MinJobAge.
    """
    present = {j.job.id for j in view.snapshot.jobs}
    gone = [job for job_id, job in active_before.items() if job_id not in present]
    if not gone:
        return
    extra = tuple(
        ObservedJob(job=job, state=JobState.DONE, finish_time=now, succeeded=False) for job in gone
    )
    view.snapshot = replace(view.snapshot, jobs=view.snapshot.jobs + extra)
    view.warnings.append(
        f"jobs {','.join(j.id for j in gone)} left squeue before their end was seen; "
        "reported done (success unknown); set MinJobAge in slurm.conf above the round length"
    )


# --- act planning --------------------------------------------------------------------


@dataclass
class ActPlan:
    starts: list[StartOrder] = field(default_factory=list)  # waiting -> running
    moves: list[StartOrder] = field(default_factory=list)  # running elsewhere: stop, start
    keep: list[JobId] = field(default_factory=list)
    preempt: list[JobId] = field(default_factory=list)  # running, not placed
    hold: list[JobId] = field(default_factory=list)  # released earlier, not placed now
    # pair members that start once this round's stopping jobs have left their GPU
    after_exit: list[AfterExit] = field(default_factory=list)
    failed: list[tuple[JobId, str]] = field(default_factory=list)

    @property
    def to_signal(self) -> list[JobId]:
        return self.preempt + [o.job_id for o in self.moves]


def plan_act(
    placement: RoundPlacement, view: SlurmView, managed_partitions: Collection[str] | None
) -> ActPlan:
    plan = ActPlan()
    by_id = {j.job.id: j for j in view.snapshot.jobs}
    apart: dict[JobId, str] = {}  # first job of a pair that cannot share -> why
    for job_id, jp in placement.jobs.items():
        obs = by_id.get(job_id)
        if obs is None:
            plan.failed.append((job_id, "not a managed job in the last observation"))
            continue
        if obs.state is JobState.DONE:
            plan.failed.append((job_id, "job has finished"))
            continue
        if jp.partner is not None and jp.partner in apart:
            plan.failed.append((job_id, f"not sharing with {jp.partner}: {apart[jp.partner]}"))
            continue
        if jp.partner is not None:
            why = pair_on_shards(jp, view.nodes)
            if isinstance(why, str):
                apart[job_id] = why + "; the pair runs apart, this job waits"
                jp = replace(jp, partner=None)
        current = None
        if obs.state is JobState.RUNNING and obs.gpu_type is not None:
            partner = _current_partner(obs, jp, view, by_id, placement)
            current = JobPlacement(job_id, obs.gpu_type, obs.nodes, partner)
        if current is not None and jp.same_place(current):
            plan.keep.append(job_id)
            continue
        order = _start_order(jp, view, managed_partitions)
        if isinstance(order, str):
            plan.failed.append((job_id, order))
            continue
        (plan.moves if obs.state is JobState.RUNNING else plan.starts).append(order)
    for obs in view.snapshot.jobs:
        job_id = obs.job.id
        if job_id in placement.jobs:
            continue
        if obs.state is JobState.RUNNING:
            plan.preempt.append(job_id)
        elif obs.state is JobState.PENDING and not view.managed[job_id].held:
            plan.hold.append(job_id)  # released in an earlier round, must not start now
    defer_pairs_beside_leaving_shards(
        plan.starts,
        plan.failed,
        plan.to_signal,
        view.managed,
        view.nodes,
        placement,
        plan.after_exit,
    )
    _stop_moves_beside_lone_shards(plan, view, placement)
    return plan


def _stop_moves_beside_lone_shards(
    plan: ActPlan, view: SlurmView, placement: RoundPlacement
) -> None:
    """A pair member moved next to a job alone on half a GPU would land beside it (first
    fit): it is stopped now and starts once the half is free (as for starts)."""
    lone = lone_shard_holders(view.managed, view.nodes)
    for o in list(plan.moves):
        partner = placement.jobs[o.job_id].partner
        holder = lone.get(o.nodes[0]) if o.shards and partner is not None else None
        if holder is None or partner is None or holder in (o.job_id, partner):
            continue
        plan.moves.remove(o)
        plan.preempt.append(o.job_id)
        why = f"pair waits: job {holder} runs alone on half a GPU there; stopped meanwhile"
        plan.failed.append((o.job_id, why))
        if any(p.job_id == partner for p in plan.starts):
            plan.starts = [p for p in plan.starts if p.job_id != partner]
            plan.failed.append((partner, why))
        if any(a.order.job_id == partner for a in plan.after_exit):
            plan.after_exit = [a for a in plan.after_exit if a.order.job_id != partner]
            plan.failed.append((partner, why))


def _current_partner(
    obs: ObservedJob,
    jp: JobPlacement,
    view: SlurmView,
    by_id: dict[JobId, ObservedJob],
    placement: RoundPlacement,
) -> JobId | None:
    """The partner a running job has for the lease test. A job on shards keeps them
    when its partner leaves (preempted or ended: it runs on alone, the other half of
    the GPU stays free) and when it is paired with a job not running yet (that job
    starts on the shards left beside it)."""
    if obs.partner is not None and obs.partner in placement.jobs:
        return obs.partner
    on_shards = any(s.shards for s in view.managed[obs.job.id].gpu_slices)
    if not on_shards or jp.partner is None:
        return None
    other = by_id.get(jp.partner)
    return jp.partner if other is None or other.state is not JobState.RUNNING else None


def _start_order(
    jp: JobPlacement, view: SlurmView, managed_partitions: Collection[str] | None
) -> StartOrder | str:
    """The order for a placement, or why it cannot be carried out on Slurm."""
    if not jp.nodes:
        return "placement names no nodes"
    counts = {s.gpus for s in jp.nodes}
    if len(counts) != 1:
        return (
            f"uneven GPUs per node {[(s.node, s.gpus) for s in jp.nodes]}: Slurm's "
            "per-node GRES request needs the same count on every node"
        )
    names = tuple(s.node for s in jp.nodes)
    if len(set(names)) != len(names):
        return f"node listed twice in {names}"
    for name in names:
        node = view.nodes.get(name)
        if node is None:
            return f"unknown node {name}"
        if node.gpu_type != jp.gpu_type:
            return f"node {name} has {node.gpu_type} GPUs, not {jp.gpu_type}"
    shared = set.intersection(*(set(view.nodes[n].partitions) for n in names))
    candidates = [
        p
        for p in view.nodes[names[0]].partitions
        if p in shared and (managed_partitions is None or p in managed_partitions)
    ]
    if not candidates:
        return f"no managed partition holds all of {','.join(names)}"
    current = view.managed[jp.job_id].partitions
    # Keep the job's own partition when it fits (its limits and accounting stay);
    # otherwise prefer a partition named after the GPU type, then the first.
    partition = next((p for p in current if p in candidates), None)
    partition = partition or (jp.gpu_type if jp.gpu_type in candidates else candidates[0])
    shards: int | str = 0
    if jp.partner is not None:
        shards = pair_on_shards(jp, view.nodes)
    elif view.managed[jp.job_id].shard_request or isinstance(
        whole_gpu_as_shards(jp, view.nodes), int
    ):
        # On nodes with shards a one-GPU-per-node job asks for one GPU's shards: 22.05
        # refuses to switch a job between gpu and shard requests in either direction
        # once the daemon has set one, so a job that may be paired later never asks gpu.
        shards = whole_gpu_as_shards(jp, view.nodes)
    if isinstance(shards, str):
        return shards
    return StartOrder(jp.job_id, partition, jp.gpu_type, counts.pop(), names, shards)


def render_update(order: StartOrder) -> str:
    """One scontrol line (read from stdin, never a shell) placing a waiting job."""
    return (
        f"update JobId={order.job_id} Partition={order.partition} "
        f"NumNodes={len(order.nodes)}-{len(order.nodes)} NodeList={','.join(order.nodes)} "
        f"Gres={order.gres()} StartTime=now"
    )


def job_list(ids: Iterable[JobId]) -> str:
    return ",".join(ids)
