"""The scheduling round, shared by the simulator and the live daemon.

    state, report = run_round(state, backend, config)

One call observes the backend, accounts the time each job received since the
previous round, recomputes the allocation when the job set (or the usable
capacity) changed or the configured period passed, turns it into a placement
with the mechanism, and asks the backend to carry it out. The caller decides
when the next round happens: the simulator advances its virtual clock, the
daemon sleeps. Which jobs the round works on, and the policy's problem for them,
come from round_jobs.py; the config and the report are round_config.py's.

All fairness accounting lives in :class:`SchedulerState` (scheduler_state.py), a
plain dataclass that round-trips through JSON; backends keep none of it.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Mapping

from slurm_gavel.core.learned_rows import relearn
from slurm_gavel.core.mechanism import pair_key
from slurm_gavel.core.restart_aware import restart_aware
from slurm_gavel.core.round_config import SchedulerConfig
from slurm_gavel.core.round_jobs import Considered, Pose, build_problem, round_jobs
from slurm_gavel.core.round_plugins import pipeline_for
from slurm_gavel.core.round_report import RoundReport
from slurm_gavel.core.round_stages import Pipeline, RoundContext
from slurm_gavel.core.scheduler_state import JobAccount, SchedulerState
from slurm_gavel.domain.cluster_model import (
    ActResult,
    ClusterBackend,
    ClusterSnapshot,
    JobPlacement,
    JobState,
    ObservedJob,
    RoundPlacement,
    allocation_capacity,
)
from slurm_gavel.domain.model import Allocation, GpuType, JobId
from slurm_gavel.policies import allocate


def account_last_round(state: SchedulerState, now: float) -> float:
    """Credit last round's placement with the wall time since it was acted on."""
    if state.last_round_time is None:
        return 0.0
    dt = max(0.0, now - state.last_round_time)
    seen_pairs: set[str] = set()
    accounts, epoch = state.jobs, state.epoch_received  # (every placed job, every round)
    for job_id, p in state.placement.items():
        acct = accounts.get(job_id)
        if acct is None:
            continue
        t = p.gpu_type
        received = acct.received_s
        received[t] = received.get(t, 0.0) + dt
        key = job_id if p.partner is None else pair_key(job_id, p.partner)
        if key in seen_pairs:
            continue
        seen_pairs.add(key)
        row = epoch.get(key)
        if row is None:
            row = epoch[key] = {}
        row[t] = row.get(t, 0.0) + dt
    state.epoch_elapsed += dt
    return dt


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
    pose: Iterable[Pose] = (),
) -> float | None:
    """Allocate: solve the policy again when there is no allocation, the job set or
    capacity changed (``key``) or reallocate_every_seconds passed, unless
    min_reallocation_interval_seconds has not passed since the last one (see
    RoundSettings). A new allocation starts a new accounting epoch. With no job to
    consider, the allocation is dropped. Returns the solve's seconds when it solved,
    else None. ``pose``: the pipeline's plugins that add to the policy's problem."""
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
    if not change:
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
    problem = build_problem(considered, state, config, capacity, now, pose)
    alloc = allocate(problem, config.policy, config.policy_options)
    same_jobs = key == state.allocation_key
    previous = state.allocation
    state.allocation, state.allocation_key, state.allocation_time = alloc, key, now
    state.allocation_rows = {o.job.id: row for o, row in considered}
    # Gavel resets the received-time accounting whenever the allocation changes:
    # priorities then measure progress towards the new fractions. A re-solve for the
    # same jobs keeps it (relearn.keeps_accounting says why), so a repeat moves no job.
    if not (same_jobs and relearn.keeps_accounting(previous, alloc)):
        state.epoch_received, state.epoch_elapsed = {}, 0.0
    return alloc.solve_seconds


def _rows_worth_a_resolve(
    state: SchedulerState, config: SchedulerConfig, considered: list[Considered]
) -> bool:
    """relearn.rows_misjudged for the jobs whose row differs from the one the allocation
    was computed with (state.allocation_rows), judged in every round in which one
    does. Whether a round re-solves is then a function of the state and the round's
    rows alone, never of which rounds judged before: a restarted daemon decides as the
    one that kept running (docs/design.md, "Canonical re-solves")."""
    alloc = state.allocation
    if alloc is None:
        return True
    apart = _rows_apart(state, alloc, considered)
    if not apart:
        return False
    accounts, measured = state.jobs, state.plugins.restart_costs

    def now_rows() -> Iterator[tuple[JobId, Mapping[GpuType, float], float | None, float, float]]:
        for o, row in apart:
            acct = accounts.get(o.job.id)
            done = acct.steps_done if acct is not None else 0.0
            attained = sum(acct.received_s.values()) if acct is not None else 0.0
            left = max(0.0, o.job.total_steps - done) if o.job.total_steps > 0 else None
            cost = restart_aware.restart_cost(o.job, measured, config)
            yield o.job.id, row, left, attained, cost

    level_free = config.policy in relearn.LEVEL_FREE_POLICIES
    return relearn.rows_misjudged(alloc, state.allocation_rows, now_rows(), level_free=level_free)


def _rows_apart(
    state: SchedulerState, alloc: Allocation, considered: list[Considered]
) -> list[Considered]:
    """The considered jobs whose row differs (by value) from their row in
    state.allocation_rows. Kept in the round's memo while it holds the same rows (a
    quiet round in the simulator) for the same allocation: a function of both."""
    memo = state.caches.memo
    if memo is not None and memo.apart_for is alloc:
        return [considered[i] for i in memo.apart]
    used = state.allocation_rows
    apart: list[int] = []
    for i, (o, row) in enumerate(considered):
        before = used.get(o.job.id)
        if before is not row and before != row:
            apart.append(i)
    if memo is not None:
        memo.apart_for, memo.apart = alloc, apart
    return [considered[i] for i in apart]


def act(
    state: SchedulerState, backend: ClusterBackend, placed: dict[JobId, JobPlacement], now: float
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


def run_round(
    state: SchedulerState,
    backend: ClusterBackend,
    config: SchedulerConfig,
    now: float | None = None,
) -> tuple[SchedulerState, RoundReport]:
    """One round: observe, account, then the pipeline's stages (round_stages.py):
    enrich, consider, allocate, keep, assign, act, after act. Mutates and returns state."""
    pipeline = pipeline_for(config)
    snap = backend.observe()
    now = snap.time if now is None else now
    account_last_round(state, now)
    completed, active = update_accounts(state, snap)
    ctx = RoundContext(state, config, snap, now, active, allocation_capacity(snap.nodes))
    for enricher in pipeline.enrich:
        enricher.enrich(ctx)
    solve_s: float | None = None
    t0 = time.perf_counter()
    if pipeline.allocates:
        ctx.considered, ctx.skipped, ctx.key, ctx.unmeasured = round_jobs(
            state, ctx.active, config, ctx.capacity
        )
        solve_s = reallocate_if_due(
            state, config, ctx.considered, ctx.key, ctx.capacity, now, pipeline.pose
        )
    for keeper in pipeline.keep:
        ctx.kept.update(keeper.keep(ctx))
    placed = pipeline.assign.assign(ctx)
    placed.update(ctx.kept)
    solve_seconds = 0.0 if solve_s is None else solve_s
    mech_s = time.perf_counter() - t0 - solve_seconds

    ctx.previous = state.placement
    placement, result = act(state, backend, placed, now)
    ctx.result = result
    for after in pipeline.after_act:
        after.after_act(ctx)
    report = RoundReport(
        round_index=state.round_index,
        time=now,
        reallocated=solve_s is not None,
        solve_seconds=solve_seconds,
        placement=placement,
        result=result,
        active_jobs=len(ctx.active),
        completed=completed,
        skipped=tuple(ctx.skipped),
        mechanism_seconds=max(0.0, mech_s),
        unmeasured=ctx.unmeasured,
    )
    state.round_index += 1
    return state, report


def placement_is_stable(state: SchedulerState, report: RoundReport, pipeline: Pipeline) -> bool:
    """True when later rounds provably repeat this round's placement until the job
    set changes: every active job runs, on the only type its allocation gives it
    time on, and each of the pipeline's ``steady`` plugins says it would repeat
    (space sharing: nothing shares and no pair has time). Then every job's single
    positive-priority entry outranks all zero-priority ones, the same entries fit
    the same GPUs, and lease extension keeps the same nodes; only the accounting
    advances. The simulator uses this to jump over such rounds (the daemon never
    needs to); ``pipeline``: the round's, pipeline_for(config).
    """
    alloc = state.allocation
    placed = report.placement.jobs
    if alloc is None or report.skipped or report.result.failed:
        return False
    if len(placed) != report.active_jobs or len(state.placement) != len(placed):
        return False
    for plugin in pipeline.steady:
        if not plugin.steady(state, report):
            return False
    for job_id, p in placed.items():
        row = alloc.fractions.get(job_id, {})
        positive = [t for t, x in row.items() if x > 1e-12]
        if positive != [p.gpu_type]:
            return False
    return True


__all__ = [
    "account_last_round",
    "allocation_capacity",
    "placement_is_stable",
    "run_round",
]
