"""The scheduling round, shared by the simulator and the live daemon.

    state, report = run_round(state, backend, config)

One call observes the backend, accounts the time each job received since the
previous round, recomputes the allocation when the job set (or the usable
capacity) changed or the configured period passed, turns it into a placement
with the mechanism, and asks the backend to carry it out. The caller decides
when the next round happens: the simulator advances its virtual clock, the
daemon sleeps. Which jobs the round works on, and the policy's problem for them,
come from round_jobs.py; the config and the report are round_types.py's.

All fairness accounting lives in :class:`SchedulerState` (scheduler_state.py), a
plain dataclass that round-trips through JSON; backends keep none of it.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import replace

from slurm_gavel.core import relearn, restart_aware
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
from slurm_gavel.core.cluster_rows import MarkedCell, rows_for
from slurm_gavel.core.job_rows import Knowledge, record_measurements
from slurm_gavel.core.mechanism import MechanismJob, assign, pair_key, single_candidates
from slurm_gavel.core.model import GpuType, JobId
from slurm_gavel.core.mold_round import mold_jobs
from slurm_gavel.core.round_jobs import Considered, build_problem, mechanism_jobs, round_jobs
from slurm_gavel.core.round_settings import RoundSettings
from slurm_gavel.core.round_types import RoundReport, SchedulerConfig
from slurm_gavel.core.scheduler_state import (
    JobAccount,
    SchedulerState,
)
from slurm_gavel.policies import allocate


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
    consolidated). The round keeps them there whatever the allocation says: their
    processes outlive slurmd and could not take the checkpoint signal, so they keep
    their placement and time accounting, and the node takes nothing new, until Slurm
    declares the node DOWN (then it requeues them itself) or it answers again."""
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


def update_accounts(
    state: SchedulerState, snap: ClusterSnapshot
) -> tuple[tuple[ObservedJob, ...], list[ObservedJob]]:
    """Observe: bring the job accounts in line with the snapshot and return the jobs
    that completed since the last round (those it had an account for: a finished job
    it never managed, as Slurm lists for MinJobAge after a daemon start, is not one)
    and the active jobs. Afterwards state.jobs holds exactly one account per active
    job (new jobs get a fresh one; completed jobs and jobs the backend no longer
    reports, e.g. cancelled while the daemon was down, lose theirs), carrying the
    backend's steps done and the highest restart count seen."""
    finished = [o for o in snap.jobs if o.state is JobState.DONE]
    completed = tuple(o for o in finished if o.job.id in state.jobs)
    for o in finished:
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
    if len(accounts) != len(observed):
        for gone in [j for j in accounts if j not in observed]:
            del accounts[gone]
    return completed, active


def reallocate_if_due(
    state: SchedulerState,
    config: SchedulerConfig,
    considered: list[Considered],
    key: str,
    capacity: Mapping[GpuType, int],
    now: float,
) -> float | None:
    """Allocate: solve the policy again when there is no allocation, the job set or
    capacity changed (``key``) or reallocate_every_seconds passed, unless
    min_reallocation_interval_seconds has not passed since the last one (see
    RoundSettings). A new allocation starts a new accounting epoch. With no job to
    consider, the allocation is dropped. Returns the solve's seconds when it solved,
    else None."""
    if not considered:
        state.allocation, state.allocation_key = None, ""
        return None
    settings = config.settings
    since = None if state.allocation_time is None else now - state.allocation_time
    due = (
        settings.reallocate_every_seconds is not None
        and since is not None
        and since >= settings.reallocate_every_seconds
    )
    change = state.allocation is None or key != state.allocation_key or due
    if not change and state.rows_checked != state.job_rows.revision:
        change = _rows_worth_a_resolve(state, config, considered)
    if (
        change
        and state.allocation is not None
        and since is not None
        and since < settings.min_reallocation_interval_seconds
    ):
        change = False
    if not change:
        return None
    problem = build_problem(considered, state, config, capacity, now)
    alloc = allocate(problem, config.policy, config.policy_options)
    same_jobs = key == state.allocation_key
    previous = state.allocation
    state.allocation, state.allocation_key, state.allocation_time = alloc, key, now
    state.allocation_rows = {o.job.id: row for o, row in considered}
    state.rows_checked = state.job_rows.revision
    # Gavel resets the received-time accounting whenever the allocation changes:
    # priorities then measure progress towards the new fractions. A re-solve for the
    # same jobs keeps it (relearn.keeps_accounting says why), so a repeat moves no job.
    if not (same_jobs and relearn.keeps_accounting(previous, alloc)):
        state.epoch_received, state.epoch_elapsed = {}, 0.0
    return alloc.solve_seconds


def _rows_worth_a_resolve(
    state: SchedulerState, config: SchedulerConfig, considered: list[Considered]
) -> bool:
    """relearn.rows_misjudged for the rows changed since the allocation; a verdict of
    no is remembered until the rows change again."""
    alloc = state.allocation
    if alloc is None:
        return True
    accounts = state.jobs

    def now_rows() -> Iterator[tuple[JobId, Mapping[GpuType, float], float | None, float, float]]:
        for o, row in considered:
            acct = accounts.get(o.job.id)
            done = acct.steps_done if acct is not None else 0.0
            attained = sum(acct.received_s.values()) if acct is not None else 0.0
            left = max(0.0, o.job.total_steps - done) if o.job.total_steps > 0 else None
            cost = restart_aware.restart_cost(o.job, acct, config)
            yield o.job.id, row, left, attained, cost

    level_free = config.policy in relearn.LEVEL_FREE_POLICIES
    if relearn.rows_misjudged(alloc, state.allocation_rows, now_rows(), level_free=level_free):
        return True
    state.rows_checked = state.job_rows.revision
    return False


def stay_credit(
    settings: RoundSettings, jobs: Mapping[JobId, MechanismJob], usable: Mapping[GpuType, int]
) -> float:
    """The stay credit this round gives (mechanism.py says why): the configured one
    when the jobs fit in the usable GPUs in total, else 0, so that it only chooses
    a job's type and never keeps a waiting job queued."""
    if settings.stay_credit_seconds > 0.0:
        demand = sum(j.scale_factor for j in jobs.values())
        if demand <= sum(usable.values()):
            return settings.stay_credit_seconds
    return 0.0


def assign_jobs(
    state: SchedulerState,
    config: SchedulerConfig,
    considered: list[Considered],
    nodes: Iterable[Node],
    kept: Mapping[JobId, JobPlacement],
    capacity: Mapping[GpuType, int],
) -> dict[JobId, JobPlacement]:
    """Assign: the mechanism's placement of the considered jobs under the allocation
    in force (none without one), leaving out the jobs ``kept`` where they run and
    the GPUs they hold."""
    if state.allocation is None or not considered:
        return {}
    jobs_m = mechanism_jobs(considered, state)
    if kept:
        jobs_m = {j: m for j, m in jobs_m.items() if j not in kept}
        nodes = _without_kept(nodes, kept)
    usable = {t: n for t, n in capacity.items() if n > 0}
    credit = stay_credit(config.settings, jobs_m, usable)
    memo = state.memo
    singles = None
    if memo is not None and not kept:  # (the memo's candidates are every job's)
        if memo.singles_for is not state.allocation:
            memo.singles = single_candidates(state.allocation, jobs_m, list(capacity))
            memo.singles_for = state.allocation
        singles = memo.singles
    return assign(
        state.allocation,
        jobs_m,
        nodes,
        state.epoch_received,
        state.epoch_elapsed,
        stay_credit_seconds=credit,
        singles=singles,
    )


def act(
    state: SchedulerState,
    backend: ClusterBackend,
    config: SchedulerConfig,
    placed: dict[JobId, JobPlacement],
    now: float,
) -> tuple[RoundPlacement, ActResult]:
    """Act: hand the placement to the backend and record what it carried out. The
    jobs it failed are not in state.placement, so the next round credits them
    nothing; each placed job counts one more round (and its first start)."""
    placement = RoundPlacement(state.round_index, now, placed)
    result = backend.act(placement)
    failed = {j for j, _ in result.failed}
    state.placement = {j: p for j, p in placed.items() if j not in failed}
    for j in state.placement:
        acct = state.jobs[j]
        acct.rounds += 1
        if acct.first_start is None:
            acct.first_start = now
    state.last_round_time = now
    return placement, result


def _mold(
    state: SchedulerState,
    config: SchedulerConfig,
    active: list[ObservedJob],
    nodes: tuple[Node, ...],
) -> list[ObservedJob]:
    """The active jobs, those with a GPU range at this round's count (mold_round.py)."""
    if not any(o.job.scale_range is not None for o in active) and not state.molds.jobs:
        return active
    capacity = allocation_capacity(nodes)
    rows = state.cluster_rows = rows_for(state.cluster_rows, config.table, capacity)
    learned = state.job_rows if config.knowledge is Knowledge.LEARNED else None
    stuck = frozenset(n.name for n in nodes if n.state is NodeState.NOT_RESPONDING)

    def cost(o: ObservedJob) -> float:  # measured, else the job's own, else the default
        return restart_aware.restart_cost(o.job, state.jobs.get(o.job.id), config)

    joint = config.settings.moldable_lp
    untried = config.settings.moldable_untried and learned is not None
    of_type = {t: frozenset(n.name for n in nodes if n.gpu_type == t) for t in capacity}
    return mold_jobs(
        state.molds, active, rows, capacity, learned, cost, stuck, joint, of_type, untried
    )


def _restart_losses(
    state: SchedulerState, active: Iterable[ObservedJob], config: SchedulerConfig
) -> dict[JobId, float]:
    """What each job's restarted runs are taken to have lost to start-up before their
    progress counts (job_rows.record_measurements): a restart's cost as the rounds plan
    it (restart_aware.restart_cost: measured per job, the job's own, its type's, the
    configured overhead). A job left out (no such figure: the daemon models none, its
    configured overhead 0, until it has measured the job's) is allowed the trust
    bounds' start_allowance_s."""
    out: dict[JobId, float] = {}
    default = config.settings.preemption_overhead_seconds
    for o in active:
        acct = state.jobs.get(o.job.id)
        cost = restart_aware.restart_cost(o.job, acct, config)
        known = (
            (acct is not None and acct.restart_cost_s is not None)
            or o.job.restart_overhead is not None
            or o.job.job_type in config.restart_seconds_by_job_type
        )
        if known or default > 0.0:
            out[o.job.id] = cost
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
    completed, active = update_accounts(state, snap)
    if config.baseline is None:
        active = _mold(state, config, active, snap.nodes)
    if config.knowledge is Knowledge.LEARNED:
        restart_s = None if config.row_bounds is None else _restart_losses(state, active, config)
        record_measurements(
            state.job_rows,
            active,
            state.placement,
            state.jobs,
            config.row_bounds,
            config.explore,
            restart_s,
        )
    kept = kept_on_unresponsive_nodes(active, snap.nodes, state.placement)
    capacity = allocation_capacity(snap.nodes)
    solve_s: float | None = None
    backfill: set[JobId] = set()
    t0 = time.perf_counter()
    if config.baseline is not None:
        skipped: list[tuple[JobId, str]] = []
        unmeasured: tuple[MarkedCell, ...] = ()
        placed = config.baseline(snap, config)
    else:
        considered, skipped, key, unmeasured = round_jobs(state, active, config, capacity)
        solve_s = reallocate_if_due(state, config, considered, key, capacity, now)
        if config.settings.restart_aware:
            protected = restart_aware.protected_runs(state, considered, snap.nodes, now, config)
            kept = {**protected, **kept}
            free = _without_kept(snap.nodes, kept) if kept else list(snap.nodes)
            placed, backfill = restart_aware.assign_around(
                state, config, considered, free, kept, capacity, now
            )
        else:
            placed = assign_jobs(state, config, considered, snap.nodes, kept, capacity)
    placed.update(kept)
    solve_seconds = 0.0 if solve_s is None else solve_s
    mech_s = time.perf_counter() - t0 - solve_seconds

    previous = state.placement
    placement, result = act(state, backend, config, placed, now)
    if config.settings.restart_aware and config.baseline is None:
        jobs = {o.job.id: o.job for o in active}
        restart_aware.protect_new_runs(state, config, previous, jobs, backfill, now)
    report = RoundReport(
        round_index=state.round_index,
        time=now,
        reallocated=solve_s is not None,
        solve_seconds=solve_seconds,
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
    "account_last_round",
    "placement_is_stable",
    "run_round",
]
