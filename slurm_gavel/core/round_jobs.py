"""The jobs a round works on: which it can place (with their throughput rows), the
policy's problem for them, and the mechanism's view of them.

Each is derived from the observed jobs; round_jobs() and mechanism_jobs() reuse the
previous round's results (SchedulerState.caches.memo) when the backend reports the very
same objects, which makes the simulator's quiet rounds cheap.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Protocol

from slurm_gavel.core.cluster_rows import ClusterRows, MarkedCell, rows_for
from slurm_gavel.core.learned_rows.job_rows import row_source
from slurm_gavel.core.mechanism import MechanismJob
from slurm_gavel.core.round_config import SchedulerConfig
from slurm_gavel.core.scheduler_state import RoundMemo, SchedulerState
from slurm_gavel.core.skips import WAITING_ON_CLUSTER, Skip, SkipCode
from slurm_gavel.domain.cluster_model import JobPlacement, JobState, ObservedJob
from slurm_gavel.domain.model import GpuType, JobId, Problem
from slurm_gavel.domain.throughputs import NoFiguresAtScale, UnknownJobType
from slurm_gavel.errors import InputError

# A job the round can place, with its throughput row on the cluster's GPU types.
Considered = tuple[ObservedJob, Mapping[GpuType, float]]


class Pose(Protocol):
    """A round plugin that adds to the policy's problem (the allocate stage's input,
    round_stages.py): what the considered jobs alone do not say, such as the
    throughputs of pairs sharing GPUs. Here, beside the problem it extends, so that
    build_problem can apply it without importing the stages."""

    @property
    def name(self) -> str: ...

    def pose(self, config: SchedulerConfig, problem: Problem) -> Problem: ...


def job_set_key(jobs: list[ObservedJob], capacity: Mapping[GpuType, int]) -> str:
    """What the allocation depends on: a changed key means a new allocation. A job's
    row changing is not in it: relearn.py decides when that is worth a re-solve."""
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
    row_of: Callable[[ObservedJob], Mapping[GpuType, float]] | None = None,
) -> tuple[list[Considered], list[tuple[JobId, Skip]]]:
    """The jobs the round can place, each with its throughput row; the others with the
    reason (unknown type, no usable GPU type, too big), so one bad job never fails
    the round. Rows come from ``rows`` (default: built here from the table for the
    cluster's GPU types): cells the table lacks for those types are estimated or
    type-blind (cluster_rows.py), so a GPU type nobody measured yet is still used;
    ``row_of`` gives each job its own row instead (job_rows.RowSource.row)."""
    if rows is None:
        rows = rows_for(None, config.table, capacity)
    types = [t for t, n in capacity.items() if n > 0]
    biggest = max((capacity[t] for t in types), default=0)
    out: list[Considered] = []
    skipped: list[tuple[JobId, Skip]] = []

    def skip(o: ObservedJob, code: SkipCode, detail: str) -> None:
        skipped.append((o.job.id, Skip(code, detail)))

    for o in active:
        if o.waiting_on:
            skip(o, SkipCode.WAITING_ON_CLUSTER, WAITING_ON_CLUSTER + o.waiting_on)
            continue
        try:
            row = rows.row(o.job.job_type, o.job.scale_factor) if row_of is None else row_of(o)
        except InputError as e:
            skip(o, _code_of(e), str(e))
            continue
        if o.allowed is not None:  # its own request: nothing on the other types
            row = {t: (v if t in o.allowed.types else 0.0) for t, v in row.items()}
        usable = False
        for t in types:
            if row.get(t, 0.0) > 0.0:
                usable = True
                break
        if not usable and o.allowed is not None and o.allowed.why:
            skip(o, SkipCode.NO_NODE_FITS, f"no usable node fits it: {o.allowed.why}")
        elif not usable:
            skip(o, SkipCode.NO_USABLE_TYPE, "no usable GPU type has a throughput for it")
        elif o.job.scale_factor > biggest:
            skip(o, SkipCode.TOO_BIG, f"needs {o.job.scale_factor} GPUs of one type")
        else:
            out.append((o, row))
    return out, skipped


def _code_of(e: InputError) -> SkipCode:
    if isinstance(e, UnknownJobType):
        return SkipCode.UNKNOWN_TYPE
    if isinstance(e, NoFiguresAtScale):
        return SkipCode.NO_FIGURES_AT_SCALE
    return SkipCode.OTHER


def round_jobs(
    state: SchedulerState,
    active: list[ObservedJob],
    config: SchedulerConfig,
    capacity: dict[GpuType, int],
) -> tuple[list[Considered], list[tuple[JobId, Skip]], str, tuple[MarkedCell, ...]]:
    """considered_jobs(), the job-set key and the unmeasured cells the jobs rely on,
    reused from the last round when the backend reports the same Job objects on the
    same capacity with the same table (a quiet round in the simulator; Slurm backends
    build new Job objects every round, so the daemon always recomputes, and its
    updated tables are new objects too)."""
    memo = state.caches.memo
    if (
        memo is not None
        and memo.table is config.table
        and len(memo.jobs) == len(active)
        and memo.capacity == capacity
        and memo.rows_revision == state.plugins.learned_rows.revision
    ):
        same = True
        # considered_jobs reads the Job and, of the ObservedJob, what limits it: a
        # job whose request (or the moldable LP: mold_round._only_on) narrowed or
        # widened its types since is a new row, though its Job object is the same
        for o, job, allowed, waiting in zip(
            active, memo.jobs, memo.allowed, memo.waiting_on, strict=True
        ):
            if (
                o.job is not job
                or (o.allowed is not allowed and o.allowed != allowed)
                or o.waiting_on != waiting
            ):
                same = False
                break
        if same:
            considered = [(active[i], row) for i, row in memo.considered]
            return considered, memo.skipped, memo.key, memo.unmeasured
    # every type the cluster has, drained or not: a drain does not refit estimates
    rows = state.caches.cluster_rows = rows_for(state.caches.cluster_rows, config.table, capacity)
    learned, own = state.plugins.learned_rows, config.plugins.learned_rows
    source = row_source(config.knowledge, rows, learned, config.given_rows, own.bounds, own.explore)
    considered, skipped = considered_jobs(
        active, config, capacity, rows, None if source is None else source.row
    )
    usable = {t: n for t, n in capacity.items() if n > 0}
    key = job_set_key([o for o, _ in considered], usable)
    revision = state.plugins.learned_rows.revision
    unmeasured = rows.marked_cells(
        (o.job.job_type, o.job.scale_factor)
        for o, _ in considered
        if source is None or rows.filled.has(o.job.job_type, o.job.scale_factor)
    )
    index = {id(o): i for i, o in enumerate(active)}
    state.caches.memo = RoundMemo(
        config.table,
        tuple(o.job for o in active),
        tuple(o.allowed for o in active),
        tuple(o.waiting_on for o in active),
        dict(capacity),
        [(index[id(o)], row) for o, row in considered],
        skipped,
        key,
        unmeasured=unmeasured,
        rows_revision=revision,
    )
    return considered, skipped, key, unmeasured


def build_problem(
    jobs: list[Considered],
    state: SchedulerState,
    config: SchedulerConfig,
    capacity: Mapping[GpuType, int],
    now: float,
    pose: Iterable[Pose] = (),
) -> Problem:
    """The policy input for jobs that considered_jobs() accepted, with their rows, as
    the pipeline's ``pose`` plugins extend it (space_sharing_plugin.SpaceSharing: pairs)."""
    types = [t for t, n in capacity.items() if n > 0]
    pjobs = []
    accounts, problem_job = state.jobs, config.table.problem_job
    for o, row in jobs:
        job = o.job
        acct = accounts.get(job.id)
        done = acct.steps_done if acct else 0.0
        pjobs.append(
            problem_job(
                job,
                types,
                row=row,
                steps_remaining=max(0.0, job.total_steps - done),
                time_since_start=max(0.0, now - job.arrival_time),
                slo=None if job.slo is None else job.slo - (now - job.arrival_time),
            )
        )
    problem = Problem(
        {t: capacity[t] for t in types},
        tuple(pjobs),
        (),
        dict(config.accounts),
        dict(config.prices),
    )
    for plugin in pose:
        problem = plugin.pose(config, problem)
    return problem


def mechanism_jobs(jobs: list[Considered], state: SchedulerState) -> dict[JobId, MechanismJob]:
    """The considered jobs as the mechanism sees them: size, row and where each runs
    now (the previous round's placement when it is the same place, since that one
    knows whether the job is consolidated). Reuses the memo's objects when unchanged."""
    out: dict[JobId, MechanismJob] = {}
    cache = state.caches.memo.mechanism_jobs if state.caches.memo is not None else {}
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
                current = prev
            else:
                current = JobPlacement(job_id, o.gpu_type, o.nodes, o.partner, True)
        m = cache.get(job_id)
        nodes = None if o.allowed is None or not o.allowed.why else o.allowed.nodes
        prefer = None if o.allowed is None else o.allowed.preferred
        if (
            m is None
            or m.current is not current
            or m.throughput is not row
            or m.nodes != nodes
            or m.prefer != prefer
            or m.node_count != o.job.node_count
        ):
            m = cache[job_id] = MechanismJob(
                job_id, o.job.scale_factor, row, current, nodes, prefer, o.job.node_count
            )
        out[job_id] = m
    return out
