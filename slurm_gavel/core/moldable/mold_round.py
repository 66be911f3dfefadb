"""The round's side of moldable jobs: each job with a GPU range is handed to
the rest of the round at the count chosen for it (core/moldable/moldable.py), as a Job whose
scale_factor is that count.

* A running job keeps the count it runs at (its GPUs as observed): a count never
  changes while a job runs. It changes when the job is restarted: by the mechanism, as
  any job, or to grow into idle GPUs where that pays for the restart (moldable.py, 3.;
  it needs the job's steps done, e.g. its progress reports, and not on a node that
  stopped answering). Such a job is handed to the round as waiting (HELD, no GPUs), so
  the mechanism places it anew at its new count: the act then moves it (a restart).
* A waiting job's count is chosen again every round among the counts in its range that
  the table has a row for at its job type (the prior) or that it was measured at
  (``MoldMemory.measured``: its own rate at each count it ran at, alone on consolidated
  GPUs, which replaces the prior's cell); with ``untried`` (learned rows and
  ``moldable_untried``, the daemon's default) also the untried counts above those,
  into GPUs nothing else takes (moldable.py, 2.). Otherwise jobs of no known type that
  were never measured keep their scale factor: nothing says how they scale.
* The molded Job objects are kept while the count stays the same, so the round's memo
  (round_jobs.py), which compares Job objects by identity, still sees a quiet round.
* Under LEARNED knowledge a job's measured cells (job_rows.py) are those of the count it
  ran at: when its count changes they are swapped for those of the new count.

What was measured (each job's rate per count, the stashed cells) is in the daemon's
state file (mold_memory_doc.py), so a restarted daemon chooses the counts that one that
kept running chooses; the rest of the memory is derived and rebuilt after a restart,
and the counts come from the running jobs again.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace

from slurm_gavel.core.cluster_rows import ClusterRows
from slurm_gavel.core.learned_rows.job_rows import JobRows, Measured, usable_rate
from slurm_gavel.core.moldable.mold_joint import JointMemo, choose_joint
from slurm_gavel.core.moldable.moldable import MoldJob, choose_counts, cluster_value, with_untried
from slurm_gavel.domain.cluster_model import Allowed, JobState, ObservedJob
from slurm_gavel.domain.model import GpuType, Job, JobId


@dataclass
class MoldMemory:
    """What the round remembers of its moldable jobs (SchedulerState.plugins.moldable_counts)."""

    # job -> (the backend's Job, the count, the Job at that count): reused while both hold
    jobs: dict[JobId, tuple[Job, int, Job]] = field(default_factory=dict)
    # job -> count -> GPU type -> steps/s it reported running there at that count
    measured: dict[JobId, dict[int, dict[GpuType, float]]] = field(default_factory=dict)
    # job -> count -> its job_rows cells at that count (LEARNED), while at another count
    stashed: dict[JobId, dict[int, dict[GpuType, Measured]]] = field(default_factory=dict)
    # job -> (what its values were computed from, value(c) per count): the same every
    # round until a measurement, the capacity or the rows change (a quiet round's cost)
    values: dict[JobId, tuple[ClusterRows, tuple[object, ...], dict[int, float] | None]] = field(
        default_factory=dict
    )
    # moldable_lp: the joint LP's last input and answer (mold_joint.py)
    joint: JointMemo = field(default_factory=JointMemo)

    def holds_jobs(self) -> bool:
        """Whether it remembers any job (what was measured as well as what was derived:
        forgetting must not depend on which caches a restart left out)."""
        return bool(self.jobs or self.values or self.measured or self.stashed)


def running_count(o: ObservedJob) -> int | None:
    """The GPUs a running job holds (None when it does not run)."""
    if o.state is not JobState.RUNNING or not o.nodes:
        return None
    return sum(s.gpus for s in o.nodes)


def at_running_count(o: ObservedJob) -> ObservedJob:
    """A running job with a range as a job of the count it runs at (the table cell its
    measured rate belongs to: daemon/progress_learning.py); any other job as it is."""
    c = running_count(o)
    if o.job.scale_range is None or c is None or c == o.job.scale_factor:
        return o
    return replace(o, job=replace(o.job, scale_factor=c))


def usable_capacity(capacity: Mapping[GpuType, int]) -> tuple[dict[GpuType, int], int]:
    """(the GPU types with GPUs to give -> how many, the most any one type has): what a
    count is weighed on, and the largest count a job can run at (one type per job).
    The round's choice and daemon/mold_view.py's account of it both read them here."""
    usable = {t: n for t, n in capacity.items() if n > 0}
    return usable, max(usable.values(), default=0)


def mold_jobs(
    memory: MoldMemory,
    active: list[ObservedJob],
    rows: ClusterRows,
    capacity: Mapping[GpuType, int],
    job_rows: JobRows | None = None,
    restart_cost: Callable[[ObservedJob], float] | None = None,
    stuck_nodes: frozenset[str] = frozenset(),
    joint: bool = False,
    nodes_of_type: Mapping[GpuType, frozenset[str]] | None = None,
    untried: bool = False,
) -> list[ObservedJob]:
    """``active`` with every job that has a range at its count for this round (the
    same list when no job has one). ``capacity``: usable GPUs per type;
    ``restart_cost``: seconds a restart costs the job (None: running jobs never grow);
    ``stuck_nodes``: nodes not answering (their jobs never grow); ``joint``: the counts
    from the LP over (type, count) (mold_joint.py) instead of moldable.choose_counts;
    ``nodes_of_type``: the nodes of each GPU type (joint: a job grown past its least
    count runs only on the types the LP gave it time on, ``ObservedJob.allowed``);
    ``untried``: a waiting job may also grow past the counts it has a row for
    (moldable.py, 2.; the caller's rule: learned rows, ``moldable_untried``)."""
    if not any(o.job.scale_range is not None for o in active):
        if memory.holds_jobs():
            memory.jobs.clear()
            memory.measured.clear()
            memory.stashed.clear()
            memory.values.clear()
        return active
    usable, biggest = usable_capacity(capacity)
    context = tuple(usable.items())
    _record(memory, active)
    mold: list[MoldJob] = []
    rates: dict[JobId, dict[int, Mapping[GpuType, float]]] = {}
    for o in active:
        if o.waiting_on:
            continue  # the round gives it nothing
        fixed = running_count(o)
        r = o.job.scale_range
        value = None
        if r is not None:
            key = (context, o.job.job_type, r, _version(memory, o.job.id))
            hit = memory.values.get(o.job.id)
            if hit is not None and hit[0] is rows and hit[1] == key:
                value = hit[2]
            else:
                by_count = count_rows(memory, o.job, rows, usable, biggest)
                if by_count is not None:  # value(c) per count (moldable.py)
                    value = {c: cluster_value(row, usable) for c, row in by_count.items()}
                memory.values[o.job.id] = (rows, key, value)
        if value is None or (fixed is not None and fixed not in value):
            value = {fixed or o.job.scale_factor: 1.0}
        if r is not None and fixed is None and untried and not joint:
            # it may also try the counts above its known ones (moldable.py, 2.)
            value = with_untried(value, min(r[1], biggest))
        left, cost = 0.0, 0.0
        if (
            fixed is not None
            and r is not None
            and restart_cost is not None
            and o.steps_done is not None
            and not any(s.node in stuck_nodes for s in o.nodes)
        ):
            left = max(0.0, o.job.total_steps - o.steps_done)
            cost = restart_cost(o)
        mold.append(MoldJob(o.job.id, value, fixed, left, cost))
        if joint:
            rates[o.job.id] = _joint_rows(memory, o, rows, usable, biggest)
    on: dict[JobId, frozenset[GpuType]] = {}
    if joint:
        requests = {o.job.id: o.job.scale_factor for o in active}
        weights = {o.job.id: o.job.priority_weight for o in active}
        choice = choose_joint(mold, rates, requests, weights, usable, memory.joint)
        counts, on = choice.counts, choice.types
    else:
        counts = choose_counts(mold, sum(usable.values()))
    out: list[ObservedJob] = []
    for o in active:
        c = counts.get(o.job.id)
        if o.job.scale_range is None or c is None:
            out.append(o)
            continue
        job = _job_at(memory, o.job, c)
        regrow = o.state is JobState.RUNNING and c != running_count(o)
        if job_rows is not None and (o.state is not JobState.RUNNING or regrow):
            _switch_cells(memory, job_rows, o.job.id, c)
        if regrow:  # restarted at its new count: waiting, for the round (module doc)
            o = _restarting(o, job)
        elif job is not o.job:
            o = replace(o, job=job)
        types = on.get(o.job.id)
        if types is not None and o.state is not JobState.RUNNING:
            o = _only_on(o, types, nodes_of_type or {})
        out.append(o)
    here = {o.job.id for o in active}
    known = memory.values.keys() | memory.measured.keys() | memory.jobs.keys()
    for gone in [j for j in known if j not in here]:
        memory.jobs.pop(gone, None)
        memory.measured.pop(gone, None)
        memory.stashed.pop(gone, None)
        memory.values.pop(gone, None)
    return out


def _joint_rows(
    memory: MoldMemory,
    o: ObservedJob,
    rows: ClusterRows,
    usable: Mapping[GpuType, int],
    biggest: int,
) -> dict[int, Mapping[GpuType, float]]:
    """The job's rows per count for the joint LP: a moldable job's known counts; a
    rigid one (or one with no known count) its row at its scale factor, the table's, or
    1 steps/s on every type where the table has none (it still takes GPUs)."""
    by_count = count_rows(memory, o.job, rows, usable, biggest)
    if by_count:
        return by_count
    sf = running_count(o) or o.job.scale_factor
    if rows.filled.has(o.job.job_type, sf):
        return {sf: rows.row(o.job.job_type, sf)}
    return {sf: dict.fromkeys(usable, 1.0)}


def _only_on(
    o: ObservedJob, types: frozenset[GpuType], nodes_of_type: Mapping[GpuType, frozenset[str]]
) -> ObservedJob:
    """The waiting job restricted to ``types`` this round (with its own request's
    restriction, if any; unchanged where the two leave no type)."""
    have = o.allowed
    keep = types if have is None else types & have.types
    if not keep or (have is not None and keep == have.types):
        return o
    nodes = frozenset().union(*(nodes_of_type.get(t, frozenset()) for t in keep))
    if have is None:
        return replace(o, allowed=Allowed(nodes, keep))
    return replace(o, allowed=replace(have, nodes=nodes & have.nodes, types=keep))


def _restarting(o: ObservedJob, job: Job) -> ObservedJob:
    """A running job as the round sees it when it is to restart at another count."""
    return replace(
        o,
        job=job,
        state=JobState.HELD,
        gpu_type=None,
        nodes=(),
        partner=None,
        measured_throughput=None,
    )


def _record(memory: MoldMemory, active: list[ObservedJob]) -> None:
    """Each running moldable job's reported rate, at the count it runs at."""
    for o in active:
        if o.job.scale_range is None or o.partner is not None or o.gpu_type is None:
            continue
        rate = usable_rate(o.measured_throughput)
        c = running_count(o)
        if rate is None or c is None:
            continue
        cells = memory.measured.setdefault(o.job.id, {}).setdefault(c, {})
        if cells.get(o.gpu_type) != rate:
            cells[o.gpu_type] = rate
            memory.values.pop(o.job.id, None)  # its values change


def _version(memory: MoldMemory, job_id: JobId) -> int:
    """How many cells the job has measured: part of its values' cache key."""
    return sum(len(cells) for cells in memory.measured.get(job_id, {}).values())


def count_rows(
    memory: MoldMemory,
    job: Job,
    rows: ClusterRows,
    usable: Mapping[GpuType, int],
    biggest: int,
) -> dict[int, Mapping[GpuType, float]] | None:
    """The job's row (steps/s per type) at each count its range lets it take, None
    when none is known (or it has no range): the table's row at that count, the cells
    it measured there replacing the prior's."""
    r = job.scale_range
    if r is None:
        return None
    own = memory.measured.get(job.id, {})
    out: dict[int, Mapping[GpuType, float]] = {}
    for c in range(r[0], min(r[1], biggest) + 1):
        cells = own.get(c)
        if rows.filled.has(job.job_type, c):
            row: Mapping[GpuType, float] = rows.row(job.job_type, c)
            if cells:
                row = {**row, **cells}
        elif cells:
            # measured on some types only, no prior: its mean there stands for all
            row = dict.fromkeys(usable, sum(cells.values()) / len(cells))
        else:
            continue
        out[c] = row
    return out or None


def _job_at(memory: MoldMemory, job: Job, c: int) -> Job:
    """The Job at count c: ``job`` itself at its own scale factor, else one object per
    (backend Job, count), kept while both stay the same."""
    if c == job.scale_factor:
        memory.jobs.pop(job.id, None)
        return job
    hit = memory.jobs.get(job.id)
    if hit is not None and hit[0] is job and hit[1] == c:
        return hit[2]
    molded = replace(job, scale_factor=c)
    memory.jobs[job.id] = (job, c, molded)
    return molded


def _switch_cells(memory: MoldMemory, rows: JobRows, job_id: JobId, c: int) -> None:
    """LEARNED: a waiting job about to run at count c takes the cells it measured at c
    (none: its prior), the ones of the count it last ran at are kept aside."""
    was = rows.scale_factor.get(job_id)
    if was is None or was == c:
        return
    cells = rows.measured.pop(job_id, None)
    if cells:
        memory.stashed.setdefault(job_id, {})[was] = cells
    back = memory.stashed.get(job_id, {}).pop(c, None)
    if back:
        rows.measured[job_id] = back
        rows.scale_factor[job_id] = c
    else:
        rows.scale_factor.pop(job_id, None)
    rows._rows.pop(job_id, None)
    rows.revision += 1
