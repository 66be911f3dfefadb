"""Restart-aware rounds (``restart_aware``, not Gavel): each run of a job is kept long
enough that its restart cost is a bounded share of it.

Gavel's mechanism re-decides every GPU every round. Under contention a job with a time
fraction below 1 is swapped out and back in round after round, and on Slurm every swap
is a requeue that costs the job its restart (checkpoint, requeue, restore: 25-250 s
measured by Sia, against 360 s rounds). The rule here, derived from each job's own
restart cost c_j and one budget b (``restart_budget``, the share of its GPU time a job's
restarts may cost):

* **Protection.** A run (a stint at one place) that starts at t is protected until
  t + c_j / b: the round keeps it exactly where it is (lease extension), whatever the
  priorities say. Its next restart, which costs c_j, is then paid for by at least
  c_j / b of uninterrupted work, so restarts cost at most a share b of the GPU time.
  A job with no restart cost (c_j = 0) is never protected: free restarts give Gavel's
  mechanism unchanged. Protection always ends: no job is kept out for longer than the
  longest protection (no starvation, unlike a stay credit that may renew forever).
* **A job that has run long gets long runs.** A new run is protected for the longer
  of c_j / b and the job's attained service (time received so far): a job that has
  run long probably runs long yet (heavy-tailed durations), and each of its restarts is
  then paid for by at least as much work as it has done, so a long job's restarts
  stay few (the last job to finish, which sets the makespan, is usually such a job).
  Protection still always ends, and the allocation's backing and the consolidation
  rule end it early.
* **A run about to finish is kept to its end.** When a protection runs out, a run
  whose job would finish within FINISH_LEASES more protections at its type's rate
  (its remaining steps, total_steps - steps done, over that rate) stays protected
  until it finishes or those protections have passed, whichever is first: preempting
  it would cost its restart and leave nearly done work waiting behind new runs (the
  shortest-remaining-work argument). Jobs that declare no total_steps never get it.
  A job that under-declares its total gains at most FINISH_LEASES more protections per
  run (total_steps is the user's word in the daemon), so no run is kept longer than
  its lease plus FINISH_LEASES c_j / b.
* **No protection for backfill.** A multi-GPU job that outranks others but does not fit
  in what the protected runs leave free must not wait for ever while smaller jobs take
  each GPU as it frees up and protect it again. Once such a job is blocked on a type,
  the jobs placed after it on that type this round start unprotected runs: the next
  round may take their GPUs back for it. So a blocked job waits at most until the
  protections on its type run out, max c / b.
* **A spread run is moved when consolidating it pays.** A multi-GPU job spread over
  more nodes than it needs runs at the table's unconsolidated rate, and lease extension
  would keep it there for ever once it is alone on its nodes (one 2-GPU LM job ran
  spread for 120 h on a Philly window). Moving it costs one restart c_j and gains
  (consolidated rate / spread rate - 1) x c_j / b over one protected run, so when the
  consolidated rate exceeds the spread one by more than the budget b, the run is
  neither protected nor lease-extended: the mechanism places it afresh (best fit), if
  some node of its type has room for it whole. A run larger than its type's largest
  node (no node ever has room for it whole) moves once it has lasted c_j / b, if the
  GPUs free with the other runs in place hold it on as few nodes as it can use, fewer
  than now (consolidation.py). The run that consolidates a spread one is protected
  c_j / b, not its attained service: that service was spent on runs nothing protected,
  and a lease as long on whole nodes kept short jobs waiting for hours.
* **Protection needs the allocation's backing.** A run on a GPU type the allocation
  gives its job no time on (a work-conserving fill of GPUs nobody with a fraction
  wanted) is not protected, and a protected run loses its protection when a
  reallocation takes its type's fraction to 0: a job the allocation wants on that
  type must not wait c / b behind a run the allocation never asked for. Within the
  run's first c / b (the part that pays for its restart) that happens only where it
  gains something: for jobs that hold no GPU and lack one of the type, or for a
  running job whose move there saves more than this job loses by moving, restarts
  included (restart_backing.py; two alike jobs swapping a P100 and a V100 at every
  re-solve made most restarts on light traces). A job that declares no total steps
  loses it at once, as before.
* **A fill moves to another fill only when the move pays.** Gavel ranks a job's fills
  (runs on types its allocation gives no time) by the time received on each, so a
  running fill swaps between two such types every two rounds, each swap a restart.
  A running fill whose restarts cost leaves its type for another unbacked one only if
  the new type's rate over the stay it can expect there, less the restart, beats
  staying; where it loses its own GPU to an entry that outranks it, it moves as in
  Gavel's order (fill_moves.py).
* **Jobs that never ran go first among equal priorities.** Gavel's priorities tie
  (every entry at infinity) after each reallocation, which on a busy trace is nearly
  every round, and the ties fall through to the deficit, the fraction, the incumbent
  and the job id. Here, right after the priority, a job that has never run goes
  before one that ran and whose restarts cost something: its first start costs no
  restart, and a job with no service yet is likely short (heavy-tailed durations, the
  least-attained-service argument), while protected runs already hold GPUs longer
  than Gavel's rounds. Jobs whose restarts cost nothing keep Gavel's order, so free
  restarts still give Gavel's mechanism unchanged. Without the next two rules this
  starved bursts of preempted short jobs behind the arrivals (EXPERIMENTS.md).
* **Everything else is Gavel's.** The allocation (the policy's LP) is unchanged and the
  jobs that are not protected are placed by Gavel's priorities on the GPUs left; the
  time the protected jobs receive counts against their fractions as usual, so they
  wait longer afterwards and fairness holds over the long run. The stay credit is not
  applied (this replaces it).

Pure functions over the scheduler's state: the clock is the round's ``now``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace

from slurm_gavel.core.mechanism import _Ranked, _ranked, single_candidates
from slurm_gavel.core.node_placement import place_chosen
from slurm_gavel.core.restart_aware.consolidation import can_consolidate, held_gpus, room_and_size
from slurm_gavel.core.restart_aware.fill_moves import fill_move_pays, select_staying
from slurm_gavel.core.restart_aware.restart_backing import lets_go, short_types
from slurm_gavel.core.restart_aware.run_protection import RunProtection
from slurm_gavel.core.restart_costs.restart_costs import NONE_MEASURED
from slurm_gavel.core.round_config import SchedulerConfig
from slurm_gavel.core.round_jobs import Considered, mechanism_jobs
from slurm_gavel.core.scheduler_state import JobAccount, SchedulerState
from slurm_gavel.domain.cluster_model import JobPlacement, JobState, Node, NodeState, slices_fit
from slurm_gavel.domain.model import Allocation, GpuType, Job, JobId


def restart_cost(job: Job, measured: Mapping[JobId, float], config: SchedulerConfig) -> float:
    """Seconds a restart of the job costs: measured (the daemon's, per job: ``measured``
    is the state's ``plugins.restart_costs``), else the job's own (a trace's
    restart_seconds), else its type's (simulate --overhead-for), else the configured
    preemption_overhead_seconds."""
    cost = measured.get(job.id)
    if cost is not None:
        return cost
    if job.restart_overhead is not None:
        return job.restart_overhead
    by_type = config.restart_seconds_by_job_type.get(job.job_type)
    if by_type is not None:
        return by_type
    return config.settings.preemption_overhead_seconds


# How many more protections a run that is about to finish may be kept for (module
# doc). Measured with 0.5, 1, 2, 4, 8 and 16 on five trace windows (EXPERIMENTS.md):
# 4 and 8 gave the lowest average JCT; 4 keeps the longest hold at 5 c / b.
FINISH_LEASES = 4.0


def protection_seconds(cost: float, budget: float) -> float:
    """How long a run is kept: its restart cost over the budget (0 without a cost)."""
    if cost <= 0.0 or budget <= 0.0:
        return 0.0
    return cost / budget


def paid_for(job: Job, measured: Mapping[JobId, float], config: SchedulerConfig) -> float:
    """The job's protection in this round's config: its restart cost over the budget."""
    return protection_seconds(
        restart_cost(job, measured, config), config.plugins.restart_aware.budget
    )


def lease_seconds(cost: float, budget: float, account: JobAccount) -> float:
    """How long a new run is protected (module doc): its restart cost over the budget,
    or the job's attained service (GPU-type time received so far) if longer; 0 without
    a cost."""
    base = protection_seconds(cost, budget)
    if base <= 0.0:
        return 0.0
    return max(base, sum(account.received_s.values()))


def about_to_finish(
    job: Job,
    account: JobAccount,
    until: float | None,
    rate: float,
    now: float,
    config: SchedulerConfig,
    measured: Mapping[JobId, float] = NONE_MEASURED,
) -> bool:
    """Whether a run whose protection ran out (at ``until``) is still kept (module
    doc): the job's remaining steps take at most FINISH_LEASES protections at ``rate``
    (steps/s on the run's type) and fewer than that many protections have passed since
    its protection ended."""
    if until is None or job.total_steps <= 0.0 or rate <= 0.0:
        return False
    more = FINISH_LEASES * paid_for(job, measured, config)
    left = max(0.0, job.total_steps - account.steps_done)
    return now < until + more and left / rate <= more


def backed(allocation: Allocation | None, job_id: JobId, gpu_type: GpuType) -> bool:
    """Whether the allocation gives the job time on the type (module doc: a run is
    protected only there); True without an allocation (nothing to go by)."""
    if allocation is None:
        return True
    return float(allocation.fractions.get(job_id, {}).get(gpu_type, 0.0)) > 0.0


def new_runs_first(ranked: list[_Ranked], waits_for_restart: Mapping[JobId, bool]) -> list[_Ranked]:
    """The mechanism's ranking with one more tie-break right after the priority: an
    entry none of whose jobs would pay a restart (``waits_for_restart`` False: never
    ran, or restarts free) before one with such a job; otherwise Gavel's order."""
    return sorted(
        ranked,
        key=lambda k: (k[0], any(waits_for_restart[j] for j in k[6]), k[1], k[2], k[3], k[4]),
    )


def consolidating_pays(
    job: Job, p: JobPlacement, config: SchedulerConfig, measured: Mapping[JobId, float]
) -> bool:
    """A spread run of the job whose consolidated rate beats its rate now by more than
    the budget (module doc); False for a consolidated or shared run, without figures,
    or for a job whose restarts cost nothing (then the round is Gavel's, unchanged)."""
    if p.consolidated or p.partner is not None or p.gpus <= 1:
        return False
    if restart_cost(job, measured, config) <= 0.0:
        return False
    table = config.table
    if not table.has(job.job_type, p.gpus):
        return False
    whole = table.throughput(job.job_type, p.gpus, p.gpu_type)
    spread = table.throughput(job.job_type, p.gpus, p.gpu_type, consolidated=False)
    return whole > spread * (1.0 + config.plugins.restart_aware.budget)


def protected_runs(
    state: SchedulerState,
    considered: list[Considered],
    nodes: Iterable[Node],
    now: float,
    config: SchedulerConfig | None = None,
) -> dict[JobId, JobPlacement]:
    """The running jobs kept where they run this round: protected until after ``now``
    (or about to finish, with ``config``), backed by the allocation (or let off it,
    restart_backing.py), alone on their GPUs (no space-sharing partner) and on nodes
    still UP with room."""
    up = [n for n in nodes if n.state is NodeState.UP]
    free = {n.name: n.usable_gpus for n in up}
    kept: dict[JobId, JobPlacement] = {}
    short = short_types(state, considered, up) if config is not None else set()
    protection, measured = state.plugins.restart_aware, state.plugins.restart_costs
    for o, row in considered:
        acct = state.jobs.get(o.job.id)
        guard = protection.get(o.job.id)
        until = None if guard is None else guard.protected_until
        if acct is None or until is None:
            continue
        if until <= now and (
            config is None
            or o.gpu_type is None
            or not about_to_finish(
                o.job, acct, until, float(row.get(o.gpu_type, 0.0)), now, config, measured
            )
        ):
            continue
        prev = state.placement.get(o.job.id)
        if (
            o.state is not JobState.RUNNING
            or prev is None
            or (
                not backed(state.allocation, o.job.id, prev.gpu_type)
                and (
                    config is None
                    or lets_go(
                        state,
                        considered,
                        o.job,
                        row,
                        prev.gpu_type,
                        short,
                        now,
                        paid_for(o.job, measured, config),
                        lambda j: restart_cost(j, measured, config),
                    )
                )
            )
            or prev.partner is not None
            or o.partner is not None
            or prev.gpu_type != o.gpu_type
            or prev.nodes != o.nodes
            or not slices_fit(prev.nodes, free)
            or (config is not None and consolidating_pays(o.job, prev, config, measured))
        ):
            continue
        for sl in prev.nodes:
            free[sl.node] -= sl.gpus
        kept[o.job.id] = prev
    return kept


def assign_around(
    state: SchedulerState,
    config: SchedulerConfig,
    considered: list[Considered],
    free_nodes: list[Node],
    kept: Mapping[JobId, JobPlacement],
    capacity: Mapping[GpuType, int],
    now: float,
) -> tuple[dict[JobId, JobPlacement], set[JobId]]:
    """Gavel's mechanism for the jobs not in ``kept`` on ``free_nodes`` (the nodes with
    the GPUs of ``kept`` taken out), as mechanism_plugin.Mechanism without the stay credit,
    and the backfilled jobs: placed on a type after a job that outranks them there was
    left out for want of GPUs. ``now``: the round's clock."""
    alloc = state.allocation
    if alloc is None or not considered:
        return {}, set()
    jobs_m = {j: m for j, m in mechanism_jobs(considered, state).items() if j not in kept}
    room, size = room_and_size(free_nodes)
    held = held_gpus(m.current for m in jobs_m.values() if m.current is not None)
    for o, _row in considered:
        m = jobs_m.get(o.job.id)
        cur = None if m is None else m.current
        if (
            m is not None
            and cur is not None
            and consolidating_pays(o.job, cur, config, state.plugins.restart_costs)
            and can_consolidate(
                cur, free_nodes, held, room, size, _lasted_its_lease(state, config, o.job, now)
            )
        ):
            jobs_m[o.job.id] = replace(m, current=None)  # placed afresh, not extended
    types = list(capacity)
    left: dict[GpuType, int] = {}
    for n in free_nodes:
        left[n.gpu_type] = left.get(n.gpu_type, 0) + n.usable_gpus
    singles = single_candidates(alloc, jobs_m, types)
    ranked = _ranked(alloc, jobs_m, state.epoch_received, state.epoch_elapsed, types, 0.0, singles)
    by_id = {o.job.id: o.job for o, _row in considered}
    waits = {j: _waits_for_restart(state, config, by_id[j]) for j in jobs_m}

    def cost(j: Job) -> float:
        return restart_cost(j, state.plugins.restart_costs, config)

    ranked = new_runs_first(ranked, waits)
    pays = fill_move_pays(jobs_m, by_id, state.jobs, cost, config.plugins.restart_aware.budget)
    ranked, chosen = select_staying(ranked, jobs_m, left, pays)
    placed_jobs = {j for i in chosen for j in ranked[i][6]}
    # where each type is first blocked: the best-ranked entry with a positive priority
    # of a single job that was placed nowhere
    blocked_at: dict[GpuType, int] = {}
    for i, k in enumerate(ranked):
        members, t = k[6], k[5]
        if len(members) == 1 and members[0] not in placed_jobs and k[0] < 0.0:
            blocked_at.setdefault(t, i)
    backfill = {
        j
        for i in chosen
        for j in ranked[i][6]
        if ranked[i][5] in blocked_at and i > blocked_at[ranked[i][5]]
    }
    placement = place_chosen(
        [(ranked[i][4], ranked[i][6], ranked[i][5]) for i in chosen], jobs_m, free_nodes
    )
    return placement, backfill


def _lasted_its_lease(state: SchedulerState, config: SchedulerConfig, job: Job, now: float) -> bool:
    """Whether the job's run has lasted c_j / b (True for a run of unknown start): the
    restart that ends it then costs at most the budget's share of it."""
    acct = state.jobs.get(job.id)
    guard = state.plugins.restart_aware.get(job.id)
    started = None if guard is None else guard.run_started
    if acct is None or started is None:
        return True
    return now - started >= paid_for(job, state.plugins.restart_costs, config)


def _waits_for_restart(state: SchedulerState, config: SchedulerConfig, job: Job) -> bool:
    """Whether placing the job costs it a restart: it ran before and restarts cost."""
    acct = state.jobs.get(job.id)
    if acct is None or acct.first_start is None:
        return False
    return restart_cost(job, state.plugins.restart_costs, config) > 0.0


def protect_new_runs(
    state: SchedulerState,
    config: SchedulerConfig,
    previous: Mapping[JobId, JobPlacement],
    jobs: Mapping[JobId, Job],
    backfill: set[JobId],
    now: float,
) -> None:
    """After the round acted: a job that started a run (placed where it did not run
    before) records its start and is protected for its restart cost over the budget,
    unless it was backfilled; a job that is not placed loses its protection; a kept
    one keeps it."""
    budget = config.plugins.restart_aware.budget
    old = state.plugins.restart_aware
    # rebuilt over the jobs with an account: a job that ended leaves the slot with it
    slot = state.plugins.restart_aware = {}
    for job_id, acct in state.jobs.items():
        p = state.placement.get(job_id)
        if p is None:
            continue  # not placed: no run, no protection
        before = previous.get(job_id)
        if before is not None and p.same_place(before):
            if job_id in old:
                slot[job_id] = old[job_id]
            continue
        guard = slot[job_id] = RunProtection(run_started=now)
        job = jobs.get(job_id)
        if (
            job_id in backfill
            or job is None
            or p.partner is not None
            or not backed(state.allocation, job_id, p.gpu_type)
            or consolidating_pays(job, p, config, state.plugins.restart_costs)
        ):
            continue
        cost = restart_cost(job, state.plugins.restart_costs, config)
        if before is not None and not before.consolidated and p.consolidated:
            # a spread run just consolidated: c / b only, not its attained service,
            # which it mostly spent spread and unprotected (EXPERIMENTS.md: a long
            # lease on two whole nodes kept short jobs waiting, 10-22 at 120 s)
            span = protection_seconds(cost, budget)
        else:
            span = lease_seconds(cost, budget, acct)
        guard.protected_until = now + span if span > 0.0 else None
