"""When a protected run whose type the allocation no longer backs is let go
(restart-aware rounds; restart_aware.py's module doc has the whole rule set and
docs/design.md §4.2 the measurements).

A reallocation that gives a running job no time on its GPU type any more used to end
its protection at once. On light traces (Alibaba's) that made most restarts: every
arrival or completion re-solves the allocation, and the LP hands the few fast GPUs to
a different set of long jobs each time, so two running jobs swap a P100 and a V100
after a few minutes, each paying its restart, and swap back at the next re-solve
(EXPERIMENTS.md, "Alibaba at 300 s"). Within the part of its run that pays for its
restart (its first c / b) a run that lost the backing is now let go only where that
gains something:

* **for a job that holds no GPU**: jobs with no GPU that the allocation gives time on
  the run's type need more GPUs there than no run holds (``short_types``); or
* **for a running job whose move there pays for both** (``swap_pays``): a job that
  runs on another type, that the allocation gives time on the run's type, would save
  more of its remaining time by moving (less its own restart) than this job loses by
  moving to the best type the allocation gives it (its restart plus the slowdown over
  its remaining work). Two alike jobs swapping types never pays; a job stuck on a K80
  that the allocation wants on this V100 usually does.

Past its first c / b the run is let go as before (the lease's extension needs the
backing), and a job that declares no total steps is let go as before (its remaining
work is unknown). Remaining work is the declared total less the steps done, both the
job's word in the daemon: a job that lies keeps a run the allocation moved away at most
c / b (its paid-for part, as if the allocation had not changed), and never keeps one
from a job that holds no GPU.

Pure functions over the scheduler's state.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping

from slurm_gavel.core.round_jobs import Considered
from slurm_gavel.core.scheduler_state import JobAccount, SchedulerState
from slurm_gavel.domain.cluster_model import Node
from slurm_gavel.domain.model import GpuType, Job

# A job's restart cost in seconds (restart_aware.restart_cost with the round's config).
RestartCost = Callable[[Job], float]


def short_types(
    state: SchedulerState, considered: list[Considered], nodes: list[Node]
) -> set[GpuType]:
    """The GPU types on which the jobs that hold no GPU, counting each on every type
    the allocation gives it time on, need more GPUs than no run holds (``nodes``: the
    usable ones)."""
    alloc = state.allocation
    if alloc is None:
        return set()
    type_of = {n.name: n.gpu_type for n in nodes}
    idle: dict[GpuType, int] = {}
    for n in nodes:
        idle[n.gpu_type] = idle.get(n.gpu_type, 0) + n.usable_gpus
    for p in state.placement.values():
        for sl in p.nodes:
            t = type_of.get(sl.node)
            if t is not None:
                idle[t] -= sl.gpus
    need: dict[GpuType, int] = {}
    for o, _row in considered:
        if o.job.id in state.placement:
            continue
        for t, x in alloc.fractions.get(o.job.id, {}).items():
            if float(x) > 0.0:
                need[t] = need.get(t, 0) + o.job.scale_factor
    return {t for t, n in need.items() if n > idle.get(t, 0)}


def time_left(job: Job, account: JobAccount | None, rate: float) -> float:
    """Seconds the job's remaining steps take at ``rate`` steps/s; inf at no rate, NaN
    where its figures are not finite numbers (callers treat that as unknown)."""
    done = account.steps_done if account is not None else 0.0
    if not (math.isfinite(job.total_steps) and math.isfinite(done)):
        return math.nan
    if not rate > 0.0:
        return math.inf
    return max(0.0, job.total_steps - done) / rate


def swap_pays(
    state: SchedulerState,
    considered: list[Considered],
    job: Job,
    row: Mapping[GpuType, float],
    here: GpuType,
    cost: RestartCost,
) -> bool:
    """Whether a running job on another type, that the allocation gives time on
    ``here``, saves more by moving there than ``job`` (running on ``here``, rates
    ``row``) loses by moving to its best backed type, restarts included (module doc).
    True where either job's remaining work is unknown (no declared total)."""
    alloc = state.allocation
    if alloc is None or job.total_steps <= 0.0:
        return True
    account = state.jobs.get(job.id)
    mine = [t for t, x in alloc.fractions.get(job.id, {}).items() if float(x) > 0.0]
    if not mine:
        return True
    stay = time_left(job, account, float(row.get(here, 0.0)))
    go = min(time_left(job, account, float(row.get(t, 0.0))) for t in mine)
    loss = go - stay + cost(job)
    if math.isnan(loss):
        return True
    for o, orow in considered:
        cur = state.placement.get(o.job.id)
        if cur is None or cur.gpu_type == here or o.job.id == job.id:
            continue
        if float(alloc.fractions.get(o.job.id, {}).get(here, 0.0)) <= 0.0:
            continue
        if o.job.total_steps <= 0.0:
            return True
        other = state.jobs.get(o.job.id)
        saved = time_left(o.job, other, float(orow.get(cur.gpu_type, 0.0))) - time_left(
            o.job, other, float(orow.get(here, 0.0))
        )
        if math.isnan(saved) or saved - cost(o.job) > loss:
            return True
    return False


def lets_go(
    state: SchedulerState,
    considered: list[Considered],
    job: Job,
    row: Mapping[GpuType, float],
    here: GpuType,
    short: set[GpuType],
    now: float,
    paid_for: float,
    cost: RestartCost,
) -> bool:
    """Whether a protected run on ``here``, a type the allocation no longer gives its
    job time on, is let go this round (module doc): its type is short for jobs with no
    GPU, it is past its first ``paid_for`` seconds (c / b) or its start is unknown, or
    a swap pays."""
    guard = state.plugins.restart_aware.get(job.id)
    started = guard.run_started if guard is not None else None
    return (
        here in short
        or started is None
        or now >= started + paid_for
        or swap_pays(state, considered, job, row, here, cost)
    )
