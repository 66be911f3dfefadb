"""A round's placement -> what the act does to Slurm (plan_act): the jobs to start and
where (StartOrder), to move, keep, signal, hold, and the pair members that start once
a stopping job has left their GPU. Pure, whatever the transport; the transport turns
each order into its commands or requests.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field, replace

from slurm_gavel.backends.slurm.fit import free_room, managed_use
from slurm_gavel.backends.slurm.records import RUNNING_STATES
from slurm_gavel.backends.slurm.shard_pairs import (
    AfterExit,
    StartOrder,
    defer_pairs_beside_leaving_shards,
    lone_shard_holders,
    pair_on_shards,
    whole_gpu_as_shards,
)
from slurm_gavel.backends.slurm.view import SlurmView
from slurm_gavel.core.skips import WAITING_ON_CLUSTER
from slurm_gavel.domain.cluster_model import (
    JobPlacement,
    JobState,
    ObservedJob,
    RoundPlacement,
)
from slurm_gavel.domain.model import JobId


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
        if obs.waiting_on:  # the round skips these; never placed where Slurm would not start
            plan.failed.append((job_id, WAITING_ON_CLUSTER + obs.waiting_on))
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
        order = _start_order(jp, view, managed_partitions, obs)
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
    _keep_within_memory(plan, view)
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


def _keep_within_memory(plan: ActPlan, view: SlurmView) -> None:
    """Starts and moves that, together with the managed jobs staying where they are,
    would need more memory or CPUs on a node than jobs the daemon does not manage leave
    there: the later ones (in the plan's order) wait this round, with the reason.
    ObservedJob.allowed checks each job against each node alone (fit.py); this checks
    them together, so Slurm is never asked to start a job it would leave pending."""
    orders = plan.starts + plan.moves
    if not orders:
        return
    staying = [view.managed[j] for j in plan.keep]
    memory, cpus = managed_use(
        (sj.needs, ((sl.node, sl.gpus) for sl in sj.gpu_slices)) for sj in staying
    )
    held_mem, held_cpus = managed_use(
        (sj.needs, ((sl.node, sl.gpus) for sl in sj.gpu_slices))
        for sj in view.managed.values()
        if sj.state in RUNNING_STATES
    )
    left_mem: dict[str, int | None] = {}
    left_cpus: dict[str, int | None] = {}
    for name, node in view.nodes.items():
        free_mem = free_room(node.memory_mb, node.memory_used_mb, held_mem, name)
        free_cpus = free_room(node.cpus, node.cpus_used, held_cpus, name)
        left_mem[name] = None if free_mem is None else free_mem - memory.get(name, 0)
        left_cpus[name] = None if free_cpus is None else free_cpus - cpus.get(name, 0)
    refused: set[JobId] = set()
    for o in orders:
        mb, c = view.managed[o.job_id].needs.on_node(o.gpus_per_node)
        short = [
            n
            for n in o.nodes
            if (left_mem.get(n) is not None and mb > (left_mem[n] or 0))
            or (left_cpus.get(n) is not None and c > (left_cpus[n] or 0))
        ]
        if short:
            refused.add(o.job_id)
            why = f"waits: {','.join(short)} has not {mb} MB and {c} CPUs left beside "
            plan.failed.append((o.job_id, why + "the jobs placed there this round"))
            continue
        for n in o.nodes:
            if left_mem.get(n) is not None:
                left_mem[n] = (left_mem[n] or 0) - mb
            if left_cpus.get(n) is not None:
                left_cpus[n] = (left_cpus[n] or 0) - c
    if refused:
        plan.starts = [o for o in plan.starts if o.job_id not in refused]
        moved = [o for o in plan.moves if o.job_id in refused]
        plan.moves = [o for o in plan.moves if o.job_id not in refused]
        plan.preempt += [o.job_id for o in moved]  # it leaves its old place all the same


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
    jp: JobPlacement,
    view: SlurmView,
    managed_partitions: Collection[str] | None,
    obs: ObservedJob | None = None,
) -> StartOrder | str:
    """The order for a placement, or why it cannot be carried out on Slurm."""
    if not jp.nodes:
        return "placement names no nodes"
    if obs is not None and obs.allowed is not None:
        off = [s.node for s in jp.nodes if s.node not in obs.allowed.nodes]
        if off:  # never placed where its own request fails (fit.py)
            return f"not placed on {','.join(off)}: {obs.allowed.why}"
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
    # otherwise prefer a partition named after the GPU type, then the first. A job
    # submitted to several (-p a,b) keeps its list where one of them holds the nodes:
    # Slurm starts it in that one, and 26.05 refuses to change a waiting job's
    # partition for a while after its submission and after each change ("Resource
    # temporarily unavailable"), which left such jobs unplaced round after round.
    partition = next((p for p in current if p in candidates), None)
    if partition is not None and len(current) > 1:
        partition = ",".join(current)
    partition = partition or (jp.gpu_type if jp.gpu_type in candidates else candidates[0])
    shards: int | str = 0
    sj = view.managed[jp.job_id]
    typed = (sj.gpu_request or sj.gpu_request_total or (None, 0))[0] is not None
    if typed and jp.partner is not None:
        return "a job that names its GPU type shares no GPU (shards are untyped)"
    if typed:
        pass  # whole GPUs of its type, never shards (22.05: no gpu <-> shard switch)
    elif jp.partner is not None:
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
    return StartOrder(jp.job_id, partition, jp.gpu_type, counts.pop(), names, shards, typed)
