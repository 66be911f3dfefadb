"""The scheduling round, shared by the simulator and the live daemon.

    state, report = run_round(state, backend, config)

One call observes the backend, accounts the time each job received since the
previous round, recomputes the allocation when the job set (or the usable
capacity) changed or the configured period passed, turns it into a placement
with the mechanism, and asks the backend to carry it out. The caller decides
when the next round happens: the simulator advances its virtual clock, the
daemon sleeps.

All fairness accounting lives in :class:`SchedulerState` (scheduler_state.py), a
plain dataclass that round-trips through JSON; backends keep none of it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace

from slurm_gavel.core.cluster_model import (
    ActResult,
    ClusterBackend,
    ClusterSnapshot,
    JobPlacement,
    JobState,
    Node,
    NodeState,
    ObservedJob,
    RoundPlacement,
)
from slurm_gavel.core.cluster_rows import ClusterRows, MarkedCell, rows_for
from slurm_gavel.core.mechanism import (
    MechanismJob,
    assign,
    pair_key,
    single_candidates,
)
from slurm_gavel.core.model import (
    GpuType,
    JobId,
    PairThroughput,
    Problem,
)
from slurm_gavel.core.round_settings import DAEMON_DEFAULTS, RoundSettings
from slurm_gavel.core.scheduler_state import (
    JobAccount,
    RoundMemo,
    SchedulerState,
    copy_state,
    fresh_state,
)
from slurm_gavel.core.throughputs import ThroughputTable
from slurm_gavel.errors import InputError
from slurm_gavel.policies import PACKING_POLICIES, PolicyOptions, allocate


@dataclass(frozen=True)
class SchedulerConfig:
    table: ThroughputTable
    policy: str = "max_min_fairness"
    # The round ignores the preemption overhead (the backend charges or estimates it).
    settings: RoundSettings = DAEMON_DEFAULTS
    policy_options: PolicyOptions = field(default_factory=PolicyOptions)
    accounts: Mapping[str, float] = field(default_factory=dict)
    prices: Mapping[GpuType, float] = field(default_factory=dict)
    # A pseudo-policy that places the jobs itself, bypassing allocation and mechanism
    # (the simulator's Slurm FIFO baselines, simulate/slurm_baseline.BASELINES): set
    # by whoever runs the round, so the round imports no simulator. None: the policy.
    baseline: BaselineFn | None = None


# Called with the snapshot and the round's config; returns the placement.
BaselineFn = Callable[[ClusterSnapshot, SchedulerConfig], dict[JobId, JobPlacement]]


@dataclass(frozen=True)
class RoundReport:
    round_index: int
    time: float
    reallocated: bool
    solve_seconds: float
    placement: RoundPlacement
    result: ActResult
    active_jobs: int
    completed: tuple[ObservedJob, ...] = ()
    # jobs the round could not consider, with the reason (unknown type, no GPU type
    # it can run on); the daemon logs these once per job
    skipped: tuple[tuple[JobId, str], ...] = ()
    mechanism_seconds: float = 0.0
    # cells of the cluster's GPU types the considered jobs rely on without a
    # measurement: (job type, scale factor, GPU type, "estimate" or "unmeasured:
    # type-blind"), see cluster_rows.py; the daemon logs each once, status shows them
    unmeasured: tuple[MarkedCell, ...] = ()


def account_last_round(state: SchedulerState, now: float) -> float:
    """Credit last round's placement with the wall time since it was acted on."""
    if state.last_round_time is None:
        return 0.0
    dt = max(0.0, now - state.last_round_time)
    seen_pairs: set[str] = set()
    for job_id, p in state.placement.items():
        acct = state.jobs.get(job_id)
        if acct is None:
            continue
        acct.received_s[p.gpu_type] = acct.received_s.get(p.gpu_type, 0.0) + dt
        key = job_id if p.partner is None else pair_key(job_id, p.partner)
        if key in seen_pairs:
            continue
        seen_pairs.add(key)
        row = state.epoch_received.setdefault(key, {})
        row[p.gpu_type] = row.get(p.gpu_type, 0.0) + dt
    state.epoch_elapsed += dt
    return dt


def kept_on_unresponsive_nodes(
    active: list[ObservedJob], nodes: tuple[Node, ...], previous: Mapping[JobId, JobPlacement]
) -> dict[JobId, JobPlacement]:
    """Running jobs with a GPU on a NOT_RESPONDING node, each at the place it runs now
    (the previous round's placement when it is the same: it knows if it is
    consolidated). The round keeps them there whatever the allocation says."""
    unresponsive = {n.name for n in nodes if n.state is NodeState.NOT_RESPONDING}
    if not unresponsive:
        return {}
    kept: dict[JobId, JobPlacement] = {}
    for o in active:
        if o.state is not JobState.RUNNING or o.gpu_type is None:
            continue
        if any(s.node in unresponsive for s in o.nodes):
            here = JobPlacement(o.job.id, o.gpu_type, o.nodes, o.partner)
            prev = previous.get(o.job.id)
            kept[o.job.id] = prev if prev is not None and prev.same_place(here) else here
    return kept


def allocation_capacity(nodes: tuple[Node, ...]) -> dict[GpuType, int]:
    """GPUs per type the allocation is computed for: the usable ones (as
    ClusterSnapshot.capacity) plus those of NOT_RESPONDING nodes. Slurm ends that
    state in seconds (slurmd restarted) or declares the node DOWN after SlurmdTimeout:
    the allocation is not recomputed, nor its accounting epoch reset, for every slurmd
    restart; the mechanism still places nothing new there (usable_gpus is 0)."""
    cap: dict[GpuType, int] = {}
    for n in nodes:
        gpus = n.usable_gpus
        if n.state is NodeState.NOT_RESPONDING:
            gpus = max(0, n.gpus - n.gpus_held_unmanaged)
        cap[n.gpu_type] = cap.get(n.gpu_type, 0) + gpus
    return cap


def _without_kept(nodes: Iterable[Node], kept: Mapping[JobId, JobPlacement]) -> list[Node]:
    """The nodes with the GPUs of kept jobs on responding nodes (a job spread over an
    unresponsive and a responding node) taken out, so nothing else is put on them."""
    held: dict[str, int] = {}
    for p in kept.values():
        for s in p.nodes:
            held[s.node] = held.get(s.node, 0) + s.gpus
    return [
        replace(n, gpus_held_unmanaged=n.gpus_held_unmanaged + held[n.name])
        if n.name in held and n.state is NodeState.UP
        else n
        for n in nodes
    ]


def _job_set_key(jobs: list[ObservedJob], capacity: Mapping[GpuType, int]) -> str:
    parts = [f"{t}={n}" for t, n in capacity.items()]
    parts += sorted(
        f"{o.job.id}:{o.job.job_type}:{o.job.scale_factor}:{o.job.priority_weight}" for o in jobs
    )
    return "|".join(parts)


def considered_jobs(
    active: list[ObservedJob],
    config: SchedulerConfig,
    capacity: Mapping[GpuType, int],
    rows: ClusterRows | None = None,
) -> tuple[list[tuple[ObservedJob, Mapping[GpuType, float]]], list[tuple[JobId, str]]]:
    """The jobs the round can place, each with its throughput row; the others with the
    reason (unknown type, no usable GPU type, too big), so one bad job never fails
    the round. Rows come from ``rows`` (default: built here from the table for the
    cluster's GPU types): cells the table lacks for those types are estimated or
    type-blind (cluster_rows.py), so a GPU type nobody measured yet is still used."""
    if rows is None:
        rows = rows_for(None, config.table, capacity)
    types = [t for t, n in capacity.items() if n > 0]
    biggest = max((capacity[t] for t in types), default=0)
    out: list[tuple[ObservedJob, Mapping[GpuType, float]]] = []
    skipped: list[tuple[JobId, str]] = []
    for o in active:
        try:
            row = rows.row(o.job.job_type, o.job.scale_factor)
        except InputError as e:
            skipped.append((o.job.id, str(e)))
            continue
        usable = False
        for t in types:  # a loop, not any(genexpr): every job, every round
            if row.get(t, 0.0) > 0.0:
                usable = True
                break
        if not usable:
            skipped.append((o.job.id, "no usable GPU type has a throughput for it"))
        elif o.job.scale_factor > biggest:
            skipped.append((o.job.id, f"needs {o.job.scale_factor} GPUs of one type"))
        else:
            out.append((o, row))
    return out, skipped


def build_problem(
    jobs: list[tuple[ObservedJob, Mapping[GpuType, float]]],
    state: SchedulerState,
    config: SchedulerConfig,
    capacity: Mapping[GpuType, int],
    now: float,
) -> Problem:
    """The policy input for jobs that considered_jobs() accepted, with their rows."""
    types = [t for t, n in capacity.items() if n > 0]
    pjobs = []
    for o, row in jobs:
        acct = state.jobs.get(o.job.id)
        done = acct.steps_done if acct else 0.0
        pjobs.append(
            config.table.problem_job(
                o.job,
                types,
                row=row,
                steps_remaining=max(0.0, o.job.total_steps - done),
                time_since_start=max(0.0, now - o.job.arrival_time),
                slo=None if o.job.slo is None else o.job.slo - (now - o.job.arrival_time),
            )
        )
    pairs: tuple[PairThroughput, ...] = ()
    if config.policy in PACKING_POLICIES:
        kinds = [(j.job_type, j.scale_factor) for j in pjobs]
        pairs = tuple(config.table.pair_throughputs(kinds, types))
    return Problem(
        {t: capacity[t] for t in types},
        tuple(pjobs),
        pairs,
        dict(config.accounts),
        dict(config.prices),
    )


def _round_jobs(
    state: SchedulerState,
    active: list[ObservedJob],
    config: SchedulerConfig,
    capacity: dict[GpuType, int],
) -> tuple[
    list[tuple[ObservedJob, Mapping[GpuType, float]]],
    list[tuple[JobId, str]],
    str,
    tuple[MarkedCell, ...],
]:
    """considered_jobs(), the job-set key and the unmeasured cells the jobs rely on,
    reused from the last round when the backend reports the same Job objects on the
    same capacity with the same table (a quiet round in the simulator; Slurm backends
    build new Job objects every round, so the daemon always recomputes, and its
    updated tables are new objects too)."""
    memo = state.memo
    if (
        memo is not None
        and memo.table is config.table
        and len(memo.jobs) == len(active)
        and memo.capacity == capacity
    ):
        same = True
        for o, job in zip(active, memo.jobs, strict=True):
            if o.job is not job:
                same = False
                break
        if same:
            considered = [(active[i], row) for i, row in memo.considered]
            return considered, memo.skipped, memo.key, memo.unmeasured
    # every type the cluster has, drained or not: a drain does not refit estimates
    rows = state.cluster_rows = rows_for(state.cluster_rows, config.table, capacity)
    considered, skipped = considered_jobs(active, config, capacity, rows)
    usable = {t: n for t, n in capacity.items() if n > 0}
    key = _job_set_key([o for o, _ in considered], usable)
    unmeasured = rows.marked_cells((o.job.job_type, o.job.scale_factor) for o, _ in considered)
    index = {id(o): i for i, o in enumerate(active)}
    state.memo = RoundMemo(
        config.table,
        tuple(o.job for o in active),
        dict(capacity),
        [(index[id(o)], row) for o, row in considered],
        skipped,
        key,
        unmeasured=unmeasured,
    )
    return considered, skipped, key, unmeasured


def _mechanism_jobs(
    jobs: list[tuple[ObservedJob, Mapping[GpuType, float]]], state: SchedulerState
) -> dict[JobId, MechanismJob]:
    out: dict[JobId, MechanismJob] = {}
    cache = state.memo.mechanism_jobs if state.memo is not None else {}
    for o, row in jobs:
        job_id = o.job.id
        current = None
        if o.state is JobState.RUNNING and o.gpu_type is not None:
            prev = state.placement.get(job_id)
            if (
                prev is not None
                and prev.gpu_type == o.gpu_type
                and (prev.nodes is o.nodes or prev.nodes == o.nodes)
                and prev.partner == o.partner
            ):
                current = prev  # reuse: same place, and it knows if it is consolidated
            else:
                current = JobPlacement(job_id, o.gpu_type, o.nodes, o.partner, True)
        m = cache.get(job_id)
        if m is None or m.current is not current or m.throughput is not row:
            m = cache[job_id] = MechanismJob(job_id, o.job.scale_factor, row, current)
        out[job_id] = m
    return out


def run_round(
    state: SchedulerState,
    backend: ClusterBackend,
    config: SchedulerConfig,
    now: float | None = None,
) -> tuple[SchedulerState, RoundReport]:
    """One round: observe, account, (re)allocate, assign, act. Mutates and returns state."""
    snap = backend.observe()
    now = snap.time if now is None else now
    account_last_round(state, now)

    completed = tuple(o for o in snap.jobs if o.state is JobState.DONE)
    for o in completed:
        state.jobs.pop(o.job.id, None)
    active = snap.active_jobs()
    observed = {o.job.id: o for o in active}
    accounts = state.jobs
    for o in active:
        acct = accounts.get(o.job.id)
        if acct is None:  # not setdefault: that would build an account every round
            acct = accounts[o.job.id] = JobAccount()
        if o.steps_done is not None:
            acct.steps_done = o.steps_done
        if o.restarts > acct.restarts:
            acct.restarts = o.restarts
    # forget jobs the backend no longer reports (cancelled while we were down, ...)
    if len(accounts) != len(observed):
        for gone in [j for j in accounts if j not in observed]:
            del accounts[gone]

    # Jobs on a node whose slurmd does not answer keep running there (their processes
    # outlive slurmd) and could not take the checkpoint signal: they keep their
    # placement and their time accounting, and the node takes nothing new, until
    # Slurm declares the node DOWN (then it requeues them itself) or it answers again.
    kept = kept_on_unresponsive_nodes(active, snap.nodes, state.placement)
    capacity = allocation_capacity(snap.nodes)
    reallocated = False
    solve_s = 0.0
    t0 = time.perf_counter()
    if config.baseline is not None:
        skipped: list[tuple[JobId, str]] = []
        unmeasured: tuple[MarkedCell, ...] = ()
        placed = config.baseline(snap, config)
        placed.update(kept)
    else:
        considered, skipped, key, unmeasured = _round_jobs(state, active, config, capacity)
        usable = {t: n for t, n in capacity.items() if n > 0}
        settings = config.settings
        due = (
            settings.reallocate_every_seconds is not None
            and state.allocation_time is not None
            and now - state.allocation_time >= settings.reallocate_every_seconds
        )
        change = state.allocation is None or key != state.allocation_key or due
        if (
            change
            and state.allocation is not None
            and state.allocation_time is not None
            and now - state.allocation_time < settings.min_reallocation_interval_seconds
        ):
            change = False  # too soon after the last one: keep it (see RoundSettings)
        if considered and change:
            problem = build_problem(considered, state, config, capacity, now)
            alloc = allocate(problem, config.policy, config.policy_options)
            solve_s = alloc.solve_seconds
            state.allocation, state.allocation_key, state.allocation_time = alloc, key, now
            # Gavel resets the received-time accounting whenever the allocation
            # changes: priorities then measure progress towards the new fractions.
            state.epoch_received, state.epoch_elapsed = {}, 0.0
            reallocated = True
        elif not considered:
            state.allocation, state.allocation_key = None, ""
        placed = {}
        if state.allocation is not None and considered:
            jobs_m = _mechanism_jobs(considered, state)
            nodes: Iterable[Node] = snap.nodes
            if kept:
                jobs_m = {j: m for j, m in jobs_m.items() if j not in kept}
                nodes = _without_kept(nodes, kept)
            credit = 0.0
            if settings.stay_credit_seconds > 0.0:
                # underloaded only: then the considered jobs fit in GPUs in total and
                # the credit mostly decides which type a job runs on, not whether it
                # runs (in overloaded rounds it could keep a waiting job queued)
                demand = sum(j.scale_factor for j in jobs_m.values())
                if demand <= sum(usable.values()):
                    credit = settings.stay_credit_seconds
            memo = state.memo
            singles = None
            if memo is not None and not kept:  # (the memo's candidates are every job's)
                if memo.singles_for is not state.allocation:
                    memo.singles = single_candidates(state.allocation, jobs_m, list(capacity))
                    memo.singles_for = state.allocation
                singles = memo.singles
            placed = assign(
                state.allocation,
                jobs_m,
                nodes,
                state.epoch_received,
                state.epoch_elapsed,
                stay_credit_seconds=credit,
                singles=singles,
            )
        placed.update(kept)
    mech_s = time.perf_counter() - t0 - solve_s

    placement = RoundPlacement(state.round_index, now, config.settings.round_seconds, placed)
    result = backend.act(placement)
    failed = {j for j, _ in result.failed}
    state.placement = {j: p for j, p in placed.items() if j not in failed}
    for j in state.placement:
        acct = state.jobs[j]
        acct.rounds += 1
        if acct.first_start is None:
            acct.first_start = now
    state.last_round_time = now
    report = RoundReport(
        round_index=state.round_index,
        time=now,
        reallocated=reallocated,
        solve_seconds=solve_s,
        placement=placement,
        result=result,
        active_jobs=len(active),
        completed=completed,
        skipped=tuple(skipped),
        mechanism_seconds=max(0.0, mech_s),
        unmeasured=unmeasured,
    )
    state.round_index += 1
    return state, report


def placement_is_stable(state: SchedulerState, report: RoundReport) -> bool:
    """True when later rounds provably repeat this round's placement until the job
    set changes: every active job runs, on the only type its allocation gives it
    time on, and nothing space-shares. Then every job's single positive-priority
    entry outranks all zero-priority ones, the same entries fit the same GPUs, and
    lease extension keeps the same nodes; only the accounting advances. The
    simulator uses this to jump over such rounds (the daemon never needs to).
    """
    alloc = state.allocation
    placed = report.placement.jobs
    if alloc is None or report.skipped or report.result.failed:
        return False
    if len(placed) != report.active_jobs or len(state.placement) != len(placed):
        return False
    if any(sum(p.fractions.values()) > 0 for p in alloc.pairs):
        return False
    for job_id, p in placed.items():
        row = alloc.fractions.get(job_id, {})
        positive = [t for t, x in row.items() if x > 1e-12]
        if positive != [p.gpu_type] or p.partner is not None:
            return False
    return True


__all__ = [
    "BaselineFn",
    "JobAccount",
    "RoundReport",
    "SchedulerConfig",
    "SchedulerState",
    "account_last_round",
    "copy_state",
    "fresh_state",
    "placement_is_stable",
    "run_round",
]
