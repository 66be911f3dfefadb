"""The features that plug into the round's stages (round_stages.py), and the one place
that chooses them from the config (``pipeline_for``).

| plugin | stages | turned on by | settings | state |
|---|---|---|---|---|
| MoldableCounts | enrich | always (no-op without GPU ranges) | MoldableSettings | MoldMemory |
| LearnedRows | enrich | ``knowledge: learned`` | LearnedRowsSettings | JobRows |
| UnresponsiveNodes | keep | always | none | none |
| RestartAware | keep, assign, after | ``restart_aware`` | RestartAwareSettings | RunProtection |
| SpaceSharing | pose, steady | a packing policy (``PACKING_POLICIES``) | none | none |
| Mechanism | assign | the default: Gavel's, stay credit | MechanismSettings | none |
| Baseline | assign | ``SchedulerConfig.baseline`` (no allocation) | none | none |
| RestartCosts | after | always (no-op without measurements) | none | restart costs |

Each plugin is a small object with a name and the stage methods it implements. Its
settings are ``config.plugins.<name>`` (plugin_settings.py), what it keeps between
rounds ``state.plugins.<name>`` (scheduler_state.PluginSlots), and what it carries
between its stages within a round ``ctx.notes[name]``. Adding a
feature: write its plugin (the smallest real one, UnresponsiveNodes, is the example in
CONTRIBUTING.md) and add it in ``pipeline_for``; scheduler.run_round is not touched.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

from slurm_gavel.core import restart_aware, restart_costs
from slurm_gavel.core.cluster_rows import rows_for
from slurm_gavel.core.job_rows import Knowledge, record_measurements
from slurm_gavel.core.mechanism import MechanismJob, assign, single_candidates
from slurm_gavel.core.mold_round import mold_jobs
from slurm_gavel.core.plugin_settings import MechanismSettings
from slurm_gavel.core.round_config import BaselineFn, SchedulerConfig
from slurm_gavel.core.round_jobs import mechanism_jobs
from slurm_gavel.core.round_report import RoundReport
from slurm_gavel.core.round_stages import Pipeline, RoundContext
from slurm_gavel.core.scheduler_state import SchedulerState
from slurm_gavel.domain.cluster_model import (
    JobPlacement,
    JobState,
    Node,
    NodeState,
    ObservedJob,
)
from slurm_gavel.domain.model import GpuType, JobId, Problem
from slurm_gavel.policies import PACKING_POLICIES


def pipeline_for(config: SchedulerConfig) -> Pipeline:
    """The round's plugins for this config, stage by stage."""
    learned = (LearnedRows(),) if config.knowledge is Knowledge.LEARNED else ()
    costs = RestartCosts()
    shares = (SpaceSharing(),) if config.policy in PACKING_POLICIES else ()
    if config.baseline is not None:
        return Pipeline(
            assign=Baseline(config.baseline),
            enrich=learned,
            keep=(UnresponsiveNodes(),),
            after_act=(costs,),
            allocates=False,
        )
    enrich = (MoldableCounts(), *learned)  # a job's count first: its row is at that count
    if config.plugins.restart_aware.enabled:
        aware = RestartAware()
        # a run on a node that stopped answering stays whatever protection says; this
        # round's measured costs count from the next round on: after the new runs'
        # protection, which is at the cost the round planned with
        return Pipeline(
            assign=aware,
            enrich=enrich,
            keep=(aware, UnresponsiveNodes()),
            after_act=(aware, costs),
            pose=shares,
            steady=shares,
        )
    return Pipeline(
        assign=Mechanism(),
        enrich=enrich,
        keep=(UnresponsiveNodes(),),
        after_act=(costs,),
        pose=shares,
        steady=shares,
    )


# ---- enrich ---------------------------------------------------------------------------


@dataclass(frozen=True)
class MoldableCounts:
    """The active jobs that give a GPU range, each at this round's count (mold_round.py)."""

    name: str = "moldable_counts"

    def enrich(self, ctx: RoundContext) -> None:
        state, config, nodes = ctx.state, ctx.config, ctx.snap.nodes
        active, memory = ctx.active, state.plugins.moldable_counts
        if not any(o.job.scale_range is not None for o in active) and not memory.holds_jobs():
            return
        capacity = ctx.capacity  # the round's allocation capacity, computed once
        rows = state.caches.cluster_rows = rows_for(
            state.caches.cluster_rows, config.table, capacity
        )
        learned = state.plugins.learned_rows if config.knowledge is Knowledge.LEARNED else None
        stuck = frozenset(n.name for n in nodes if n.state is NodeState.NOT_RESPONDING)

        measured = state.plugins.restart_costs

        def cost(o: ObservedJob) -> float:  # measured, else the job's own, else the default
            return restart_aware.restart_cost(o.job, measured, config)

        own = config.plugins.moldable_counts
        joint, untried = own.lp, own.untried and learned is not None
        of_type = {t: frozenset(n.name for n in nodes if n.gpu_type == t) for t in capacity}
        ctx.active = mold_jobs(
            memory, active, rows, capacity, learned, cost, stuck, joint, of_type, untried
        )


@dataclass(frozen=True)
class LearnedRows:
    """Each job's progress into its own row (job_rows.py), within the trust bounds."""

    name: str = "learned_rows"

    def enrich(self, ctx: RoundContext) -> None:
        state, config = ctx.state, ctx.config
        own = config.plugins.learned_rows
        restart_s = None if own.bounds is None else restart_losses(ctx)
        record_measurements(
            state.plugins.learned_rows, ctx.active, state.placement, state.jobs, own.bounds,
            own.explore, restart_s,
        )  # fmt: skip


def restart_losses(ctx: RoundContext) -> dict[JobId, float]:
    """What each job's restarted runs are taken to have lost to start-up before their
    progress counts (job_rows.record_measurements): a restart's cost as the rounds plan
    it (restart_aware.restart_cost: measured per job, the job's own, its type's, the
    configured overhead). A job left out (no such figure: the daemon models none, its
    configured overhead 0, until it has measured the job's) is allowed the trust
    bounds' start_allowance_s."""
    state, config = ctx.state, ctx.config
    out: dict[JobId, float] = {}
    default = config.settings.preemption_overhead_seconds
    measured = state.plugins.restart_costs
    for o in ctx.active:
        cost = restart_aware.restart_cost(o.job, measured, config)
        known = (
            o.job.id in measured
            or o.job.restart_overhead is not None
            or o.job.job_type in config.restart_seconds_by_job_type
        )
        if known or default > 0.0:
            out[o.job.id] = cost
    return out


# ---- space sharing: pose, steady -------------------------------------------------------


@dataclass(frozen=True)
class SpaceSharing:
    """Space sharing, Gavel's packed policies (``PACKING_POLICIES``: the policy is what
    turns it on; it has no settings and keeps nothing between rounds). Its pose gives
    the policy the throughputs of every pair of the considered jobs' kinds sharing
    GPUs, from the table's pair cells, so that the allocation can give pairs time of
    their own (``Allocation.pairs``). What follows needs no plugin: the mechanism
    places a pair with time as one entry of its own (mechanism.py; an allocation
    without pairs has none), the accounting keys its time by ``mechanism.pair_key``,
    and a re-solve resets that accounting (relearn.keeps_accounting). Its steady
    answer keeps the simulator from jumping over rounds while pairs may form or
    split: a pair that has time, or a job placed with a partner."""

    name: str = "space_sharing"

    def pose(self, config: SchedulerConfig, problem: Problem) -> Problem:
        kinds = [(j.job_type, j.scale_factor) for j in problem.jobs]
        pairs = tuple(config.table.pair_throughputs(kinds, problem.gpu_types))
        return replace(problem, pair_throughputs=pairs)

    def steady(self, state: SchedulerState, report: RoundReport) -> bool:
        alloc = state.allocation
        if alloc is not None and any(sum(p.fractions.values()) > 0 for p in alloc.pairs):
            return False
        return all(p.partner is None for p in report.placement.jobs.values())


# ---- keep -----------------------------------------------------------------------------


@dataclass(frozen=True)
class UnresponsiveNodes:
    """Running jobs with a GPU on a NOT_RESPONDING node, each kept at the place it runs
    now (the previous round's placement when it is the same: it knows if it is
    consolidated), whatever the allocation says: their processes outlive slurmd and
    could not take the checkpoint signal, so they keep their placement and time
    accounting, and the node takes nothing new, until Slurm declares the node DOWN
    (then it requeues them itself) or it answers again."""

    name: str = "unresponsive_nodes"

    def keep(self, ctx: RoundContext) -> dict[JobId, JobPlacement]:
        nodes, previous = ctx.snap.nodes, ctx.state.placement
        unresponsive = {n.name for n in nodes if n.state is NodeState.NOT_RESPONDING}
        if not unresponsive:
            return {}
        kept: dict[JobId, JobPlacement] = {}
        for o in ctx.active:
            if o.state is not JobState.RUNNING or o.gpu_type is None:
                continue
            if any(s.node in unresponsive for s in o.nodes):
                here = JobPlacement(o.job.id, o.gpu_type, o.nodes, o.partner)
                prev = previous.get(o.job.id)
                kept[o.job.id] = prev if prev is not None and prev.same_place(here) else here
        return kept


# ---- assign ---------------------------------------------------------------------------


def without_kept(nodes: Iterable[Node], kept: Mapping[JobId, JobPlacement]) -> list[Node]:
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


def stay_credit(
    settings: MechanismSettings, jobs: Mapping[JobId, MechanismJob], usable: Mapping[GpuType, int]
) -> float:
    """The stay credit this round gives (mechanism.py says why): the configured one
    when the jobs fit in the usable GPUs in total, else 0, so that it only chooses
    a job's type and never keeps a waiting job queued."""
    if settings.stay_credit_seconds > 0.0:
        demand = sum(j.scale_factor for j in jobs.values())
        if demand <= sum(usable.values()):
            return settings.stay_credit_seconds
    return 0.0


@dataclass(frozen=True)
class Mechanism:
    """Gavel's mechanism: the considered jobs placed under the allocation in force (none
    without one), leaving out the kept jobs and the GPUs they hold."""

    name: str = "mechanism"

    def assign(self, ctx: RoundContext) -> dict[JobId, JobPlacement]:
        state, considered, kept = ctx.state, ctx.considered, ctx.kept
        if state.allocation is None or not considered:
            return {}
        jobs_m = mechanism_jobs(considered, state)
        nodes: Iterable[Node] = ctx.snap.nodes
        if kept:
            jobs_m = {j: m for j, m in jobs_m.items() if j not in kept}
            nodes = without_kept(nodes, kept)
        usable = {t: n for t, n in ctx.capacity.items() if n > 0}
        credit = stay_credit(ctx.config.plugins.mechanism, jobs_m, usable)
        memo = state.caches.memo
        singles = None
        if memo is not None and not kept:  # (the memo's candidates are every job's)
            if memo.singles_for is not state.allocation:
                memo.singles = single_candidates(state.allocation, jobs_m, list(ctx.capacity))
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


@dataclass(frozen=True)
class Baseline:
    """A pseudo-policy that places the jobs itself (the simulator's Slurm FIFO
    baselines): no allocation, no mechanism."""

    place: BaselineFn
    name: str = "baseline"

    def assign(self, ctx: RoundContext) -> dict[JobId, JobPlacement]:
        return self.place(ctx.snap, ctx.config)


# ---- restart-aware rounds: keep, assign, after act ------------------------------------


@dataclass(frozen=True)
class RestartAware:
    """Restart-aware rounds (restart_aware.py): protected runs kept where they run, the
    mechanism around them without the stay credit, and each new run protected once
    the backend started it (backfilled ones excepted)."""

    name: str = "restart_aware"

    def keep(self, ctx: RoundContext) -> dict[JobId, JobPlacement]:
        return restart_aware.protected_runs(
            ctx.state, ctx.considered, ctx.snap.nodes, ctx.now, ctx.config
        )

    def assign(self, ctx: RoundContext) -> dict[JobId, JobPlacement]:
        kept = ctx.kept
        free = without_kept(ctx.snap.nodes, kept) if kept else list(ctx.snap.nodes)
        placed, backfill = restart_aware.assign_around(
            ctx.state, ctx.config, ctx.considered, free, kept, ctx.capacity, ctx.now
        )
        ctx.notes[self.name] = backfill
        return placed

    def after_act(self, ctx: RoundContext) -> None:
        jobs = {o.job.id: o.job for o in ctx.active}
        backfill: set[JobId] = ctx.notes.get(self.name, set())
        restart_aware.protect_new_runs(ctx.state, ctx.config, ctx.previous, jobs, backfill, ctx.now)


# ---- measured restart costs: after act ------------------------------------------------


@dataclass(frozen=True)
class RestartCosts:
    """Each job's restart cost as the daemon measured it (daemon/restart_clock.py),
    received with the backend's report of the act (``ActResult.restart_costs``) and
    kept in its own slot (restart_costs.py), where restart_aware.restart_cost reads it
    before any configured figure. The simulator measures nothing: its slot stays empty."""

    name: str = "restart_costs"

    def after_act(self, ctx: RoundContext) -> None:
        slot = ctx.state.plugins.restart_costs
        if slot or ctx.result.restart_costs:
            restart_costs.fold(slot, ctx.result.restart_costs, ctx.state.jobs)
