"""Slurm's records -> the round's snapshot (build_view, add_vanished): which jobs are
managed, in what state, on which GPUs, and the nodes as the scheduler sees them.

Pure, whatever the transport (CLI or slurmrestd), so it is tested on captured JSON
without a cluster. The other pure half, placement -> the act's plan, is act_plan.py.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from slurm_gavel.backends.slurm.arrays import throttled
from slurm_gavel.backends.slurm.eligibility import (
    SINGLETON,
    singleton_free,
    user_hold_reason,
    waiting_on,
)
from slurm_gavel.backends.slurm.fit import (
    NodeRoom,
    allowed_nodes,
    free_room,
    managed_use,
    per_node_gpus,
    preferred_nodes,
)
from slurm_gavel.backends.slurm.layout import asked_nodes, layout_why
from slurm_gavel.backends.slurm.records import RUNNING_STATES, WAITING_STATES, SlurmJob, SlurmNode
from slurm_gavel.backends.slurm.reservations import (
    FREE,
    NO_RESERVATIONS,
    JobPlaces,
    Reservations,
    closed_nodes,
    job_places,
)
from slurm_gavel.backends.slurm.shard_pairs import (
    lone_half_warnings,
    shard_partners,
)
from slurm_gavel.backends.slurm.shard_pairs import (
    managed_gpus as managed_gpus_of,
)
from slurm_gavel.domain.cluster_model import (
    Allowed,
    ClusterSnapshot,
    JobState,
    Node,
    NodeSlice,
    ObservedJob,
)
from slurm_gavel.domain.comment_grammar import ManagedSpec
from slurm_gavel.domain.model import Job, JobId


@dataclass
class SlurmView:
    """One observation: the snapshot plus the raw Slurm records act() needs."""

    snapshot: ClusterSnapshot
    managed: dict[JobId, SlurmJob]  # managed jobs by id (all states)
    nodes: dict[str, SlurmNode]  # every node Slurm reported, by name
    warnings: list[str] = field(default_factory=list)
    # Waiting jobs whose --reservation cannot hold them (reservations.py), -> why:
    # given back to Slurm by the daemon (giveback.py), with the managed jobs it refuses.
    give_back: dict[JobId, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ObservedMemo:
    """A managed job's ObservedJob in a view, and what it was made from: its record
    (the object), the other inputs of _observed, the ObservedJob before the node fit
    (base), the fit's answer and a reservation's shortfall (build_view)."""

    record: SlurmJob
    inputs: tuple[Any, ...]
    base: ObservedJob
    allowed: Allowed | None
    short: str | None
    observed: ObservedJob


def is_managed_partition(parts: Iterable[str], managed: Collection[str] | None) -> bool:
    return managed is None or any(p in managed for p in parts)


def build_view(
    nodes: list[SlurmNode],
    jobs: list[SlurmJob],
    managed_partitions: Collection[str] | None,
    now: float,
    first_submit: dict[JobId, float] | None = None,
    held_back: Mapping[JobId, str] | None = None,
    reservations: Reservations = NO_RESERVATIONS,
    layouts: dict[JobId, int | None] | None = None,
    memo: dict[JobId, ObservedMemo] | None = None,
) -> SlurmView:
    """The snapshot the round loop sees; malformed managed comments become warnings.

    first_submit (updated in place) remembers each job's earliest submit time:
    Slurm 22.05 resets submit_time on every requeue, which would make a preempted
    job look younger than it is. held_back: jobs a recent round found blocked by a
    limit (eligibility.HeldBack), still kept out. reservations: Slurm's, now; their
    nodes are kept from the jobs they do not admit and a reservation's jobs are kept
    on them (reservations.py). layouts (updated in place, like first_submit): each
    job's node count as its request fixed it when first seen (layout.asked_nodes; the
    daemon's placements change the record's). memo (replaced in place by this
    round's): each managed job's ObservedJob of the last view with what it was made
    from; a job whose record is the same object as then (the CLI transport hands an
    unchanged listing record's job back as it is) and whose other inputs are equal
    gets that ObservedJob again instead of a new one, equal to it.
    """
    first_submit = {} if first_submit is None else first_submit
    last_memo = {} if memo is None else dict(memo)
    if memo is not None:
        memo.clear()
    layouts = {} if layouts is None else layouts
    warnings: list[str] = []
    managed: dict[JobId, SlurmJob] = {}
    observed: list[ObservedJob] = []
    specs: list[tuple[SlurmJob, ManagedSpec, float]] = []
    for sj in jobs:
        if not is_managed_partition(sj.partitions, managed_partitions):
            continue
        reading = sj.reading  # no weight cap: the daemon caps it (core/priority_weights.py)
        if reading.refusal is not None:
            warnings.append(f"{reading.refusal} (left to Slurm, not managed)")
            continue
        spec = reading.spec
        if spec is None:
            continue
        managed[sj.job_id] = sj
        arrival = min(float(sj.submit_time), first_submit.get(sj.job_id, float("inf")))
        first_submit[sj.job_id] = arrival
        if sj.job_id not in layouts:
            layouts[sj.job_id] = asked_nodes(sj)
        specs.append((sj, spec, arrival))
    partners = shard_partners(managed.values())
    by_name = {n.name: n for n in nodes}
    warnings += lone_half_warnings(managed, jobs, partners, by_name)
    types = {n.name: n.gpu_type for n in nodes}
    rooms = node_rooms(nodes, managed.values(), managed_partitions)
    give_back: dict[JobId, str] = {}
    all_places: list[JobPlaces] = []
    places_of: dict[JobId, JobPlaces] = {}
    waits_of: dict[JobId, str | None] = {}
    for sj, spec, _ in specs:
        waiting = sj.state in WAITING_STATES
        if sj.state in RUNNING_STATES or waiting:
            places_of[sj.job_id] = job_places(sj, reservations, nodes, now)
            all_places.append(places_of[sj.job_id])
        if waiting:
            alone = sj.dependency == SINGLETON and singleton_free(sj, jobs)
            waits = waiting_on(sj, now, held_back or {}, singleton_ok=alone)
            if waits is None:
                waits = places_of[sj.job_id].waits
            waits_of[sj.job_id] = user_hold_reason(sj.job_id) if spec.user_hold else waits
    # a throttled array's tasks beyond its limit (arrays.throttled), of those free to run
    free = [j for j, w in waits_of.items() if w is None]
    waits_of.update(throttled(managed, free))
    # Jobs asking alike (GPU type, size, node needs, reservations' places) are allowed
    # alike: the nodes are checked once per such request, not once per job (at 5,000
    # jobs of a few requests, 5,000 walks over every node: ~0.2 s of each round).
    allowed_memo: dict[tuple, Allowed | None] = {}
    for sj, spec, arrival in specs:
        waits = waits_of.get(sj.job_id)
        places = places_of.get(sj.job_id, FREE)
        count = layouts[sj.job_id]
        partner = partners.get(sj.job_id)
        # what _observed reads besides the record: the node type of a shard's node
        shard_type = types.get(sj.gpu_slices[0].node) if sj.gpu_slices else None
        inputs = (arrival, partner, waits, count, shard_type)
        last = last_memo.get(sj.job_id)
        if last is not None and last.record is sj and last.inputs == inputs:
            base = last.base
        else:
            base = _observed(sj, spec, arrival, partner, types, waits)
            if count is not None:
                base = replace(base, job=replace(base.job, node_count=count))
            last = None
        o = base
        allowed: Allowed | None = None
        short: str | None = None
        if base.state is not JobState.DONE:
            allowed = job_allowed(sj, base.job.scale_factor, rooms, count, places, allowed_memo)
            waiting = sj.state in WAITING_STATES
            short = reservation_short(sj, base, places, rooms, count) if waiting else None
            if short is not None and not spec.user_hold:
                give_back[sj.job_id] = short
            else:
                short = None
            if last is not None and last.allowed == allowed and last.short == short:
                o = last.observed
            else:
                o = replace(base, allowed=allowed)
                if short is not None:
                    o = replace(o, waiting_on=short)
        if memo is not None:
            memo[sj.job_id] = ObservedMemo(sj, inputs, base, allowed, short, o)
        observed.append(o)
    closed = closed_nodes(reservations, nodes, all_places, now)
    for gone in [j for j in first_submit if j not in managed]:
        del first_submit[gone]
    for gone in [j for j in layouts if j not in managed]:
        del layouts[gone]
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
                # a node reserved for no managed job: none of its GPUs is the round's
                gpus_held_unmanaged=sn.gpus
                if sn.name in closed
                else max(0, sn.gpus_used - managed_gpus.get(sn.name, 0)),
            )
        )
    snapshot = ClusterSnapshot(time=now, nodes=tuple(out_nodes), jobs=tuple(observed))
    return SlurmView(snapshot, managed, {n.name: n for n in nodes}, warnings, give_back)


def node_rooms(
    nodes: Iterable[SlurmNode],
    managed: Iterable[SlurmJob],
    managed_partitions: Collection[str] | None,
) -> list[NodeRoom]:
    """The managed partitions' typed GPU nodes with the memory and CPUs jobs the daemon
    does not manage leave free (fit.free_room): what managed jobs hold is placed anew
    each round."""
    memory, cpus = managed_use(
        (sj.needs, ((sl.node, sl.gpus) for sl in sj.gpu_slices))
        for sj in managed
        if sj.state in RUNNING_STATES
    )
    return [
        NodeRoom(
            n.name,
            n.gpu_type,
            n.gpus,
            n.features,
            free_room(n.memory_mb, n.memory_used_mb, memory, n.name),
            free_room(n.cpus, n.cpus_used, cpus, n.name),
        )
        for n in nodes
        if n.gpu_type is not None and is_managed_partition(n.partitions, managed_partitions)
    ]


def job_allowed(
    sj: SlurmJob,
    scale: int,
    rooms: list[NodeRoom],
    node_count: int | None = None,
    places: JobPlaces = FREE,
    memo: dict[tuple, Allowed | None] | None = None,
) -> Allowed | None:
    """ObservedJob.allowed: None where the job's request and the reservations (places:
    reservations.job_places) rule out no node. node_count: the nodes its request fixes
    (layout.py); a scale it cannot divide allows none. memo: the answers so far for
    these rooms (one round's), by everything the answer depends on."""
    request = sj.gpu_request or sj.gpu_request_total
    key = (
        scale, node_count, sj.node_count, None if request is None else request[0],
        sj.needs, places,
    )  # fmt: skip
    if memo is not None and key in memo:
        return memo[key]
    out = _job_allowed(sj, scale, rooms, node_count, places)
    if memo is not None:
        memo[key] = out
    return out


def _job_allowed(
    sj: SlurmJob,
    scale: int,
    rooms: list[NodeRoom],
    node_count: int | None,
    places: JobPlaces,
) -> Allowed | None:
    if node_count is not None and (bad := layout_why(scale, node_count)):
        return Allowed(frozenset(), frozenset(), bad)
    request = sj.gpu_request or sj.gpu_request_total
    gpu_type = request[0] if request is not None else None
    per_node = per_node_gpus(scale, node_count or sj.node_count)
    within = _within(rooms, places)
    nodes, why = allowed_nodes(gpu_type, per_node, sj.needs, within)
    if len(within) < len(rooms) and places.why:
        why = f"{why}; {places.why}" if why else places.why
    prefer = preferred_nodes(sj.needs)
    preferred = None
    if prefer is not None:
        preferred = frozenset(r.name for r in within if r.name in nodes and prefer(r.features))
    if places.prefer is not None:  # FLEX: its reservation's nodes first
        preferred = (preferred or nodes) & places.prefer
    if not why and not preferred:
        return None
    types = frozenset(r.gpu_type for r in within if r.name in nodes)
    return Allowed(nodes, types, why, preferred or None)


def _within(rooms: list[NodeRoom], places: JobPlaces) -> list[NodeRoom]:
    if places.only is not None:
        return [r for r in rooms if r.name in places.only]
    if places.off:
        return [r for r in rooms if r.name not in places.off]
    return rooms


def reservation_short(
    sj: SlurmJob,
    o: ObservedJob,
    places: JobPlaces,
    rooms: list[NodeRoom],
    node_count: int | None = None,
) -> str | None:
    """Why a waiting reservation job is given back (its reservation is gone, or its
    nodes cannot hold the job's GPUs, or the node count its request fixes, however long
    it waits), or None."""
    if places.give_back:
        return places.give_back
    if places.only is None:
        return None
    fits = o.allowed.nodes if o.allowed is not None else places.only
    inside = [r for r in rooms if r.name in places.only and r.name in fits]
    have = sum(r.gpus for r in inside)
    if node_count is not None and len(inside) < node_count:
        return (
            f"its reservation {sj.reservation} has {len(inside)} nodes the scheduler "
            f"manages that fit its request, and it asks for {node_count} nodes"
        )
    if have >= o.job.scale_factor:
        return None
    return (
        f"its reservation {sj.reservation} has {have} GPUs the scheduler manages that fit "
        f"its request, and it asks for {o.job.scale_factor}"
    )


def _observed(
    sj: SlurmJob,
    spec: ManagedSpec,
    arrival: float,
    partner: JobId | None = None,
    node_types: dict[str, str | None] | None = None,
    waits: str | None = None,
) -> ObservedJob:
    scale = spec.scale_factor
    if scale is None and sj.gpu_request is not None:
        scale = sj.gpu_request[1] * max(1, sj.node_count)
    elif scale is None and sj.gpu_request_total is not None:  # sbatch --gpus=TYPE:N
        scale = sj.gpu_request_total[1]
    # The owner's uid from Slurm's record (squeue's user_id): progress reports must
    # be files of this uid (daemon/progress_learning.py).
    uid = sj.user_id
    job = Job(
        id=sj.job_id,
        job_type=spec.job_type,
        scale_factor=scale or 1,
        scale_range=spec.scale_range,  # moldable: core/moldable/mold_round.py
        priority_weight=spec.priority_weight,
        total_steps=spec.total_steps or 0.0,
        arrival_time=arrival,
        account=sj.account or None,
        slo=spec.slo,
        qos=sj.qos or None,  # the admin's weight for it: slurm_gavel/core/priority_weights.py
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
            waiting_on=waits,
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
