"""What `status` and `explain` show of a moldable job: its GPU range, the
count of its run (or of its next start) and why the round chose that count.

The record (``moldable`` of a job in the state document and the public view) holds
numbers the daemon computed and fixed codes, never text a user wrote: the range comes
from the comment grammar, which accepts only ``MIN-MAX`` with whole numbers
(core/moldable/moldable.py), and is written here as two integers.

``chosen``, why the count is what it is (the rules of core/moldable/moldable.py and
core/moldable/mold_round.py, read back from the round's memory, not decided again here):

* ``running``: the count of the run going on; a count changes only at a (re)start;
* ``moved``: a running job the round moves keeps the count of its run;
* ``regrow``: restarted at a larger count, the time it saves on the job's remaining
  steps being at least 2x its restart cost;
* ``least``: the least count of its range with a throughput row;
* ``grown``: above that, grown into GPUs no other job was given;
* ``untried``: grown past the largest count it has a row for (``moldable_untried``,
  learned rows), into GPUs no known gain took;
* ``joint``: the joint LP over (GPU type, count) chose it (``moldable_lp: true``);
* ``no-rows``: no row at any count of its range, and none measured: its request;
* ``not-chosen``: the round did not consider it (it waits on Slurm or was skipped).

``limit``, why not more, where the count is below the range's maximum: ``capacity``
(no GPU type has more GPUs), ``rows`` (the table has no row for its job type above it,
nor did it report at one), ``share`` (a larger count would take GPUs the round gave
others, or gains nothing on its rows), ``running`` (it grows only by a restart that
pays), ``no-progress`` (that, and it reports no steps done to weigh a restart by),
``untried-running`` (no row above its count: a larger one is tried at a (re)start
only, never by restarting a run for a guess). ``counts``: each count of the range it
may take, its steps/s averaged over the cluster's GPUs (what the choice compares) and
what backs it: the table's row (``prior``), its own reports at that count on every GPU
type with a row (``measured``) or some (``partly measured``), or its reports alone
(``measured, no prior``).

Pure over the round's state; ``last_count`` is the GPUs of the job's last run where
it (re)starts or waits, from ``LastCounts``: the daemon's transient memory of the count
each job last ran at (lost with the daemon, as the round's count memory is).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from slurm_gavel.core.learned_rows.job_rows import Knowledge
from slurm_gavel.core.moldable.mold_round import count_rows, running_count, usable_capacity
from slurm_gavel.core.moldable.moldable import cluster_value
from slurm_gavel.core.round_config import SchedulerConfig
from slurm_gavel.core.scheduler_state import SchedulerState
from slurm_gavel.domain.cluster_model import (
    ClusterSnapshot,
    JobState,
    NodeSlice,
    ObservedJob,
    allocation_capacity,
)
from slurm_gavel.domain.model import JobId

# (the observed job, its state in the view, the nodes the view gives it) -> record
MoldView = Callable[[ObservedJob, str, tuple[NodeSlice, ...]], dict[str, Any] | None]

RUNS = ("running", "starting", "kept", "preempted")


class LastCounts:
    """The GPUs each moldable job held the last time the daemon saw it run."""

    def __init__(self) -> None:
        self.counts: dict[JobId, int] = {}

    def update(self, snap: ClusterSnapshot | None) -> None:
        if snap is None:
            return
        here = set()
        for o in snap.jobs:
            if o.job.scale_range is None:
                continue
            here.add(o.job.id)
            c = running_count(o)
            if c is not None:
                self.counts[o.job.id] = c
        for gone in [j for j in self.counts if j not in here]:
            del self.counts[gone]


def mold_view(
    state: SchedulerState,
    config: SchedulerConfig,
    snap: ClusterSnapshot | None,
    last: LastCounts | None = None,
) -> MoldView | None:
    """The view of each moldable job's count; None where no job has a range."""
    if snap is None or not any(o.job.scale_range is not None for o in snap.jobs):
        return None
    usable, biggest = usable_capacity(allocation_capacity(snap.nodes))
    rows = state.caches.cluster_rows
    memory = state.plugins.moldable_counts
    own = config.plugins.moldable_counts
    joint, untried = own.lp, own.untried and config.knowledge is Knowledge.LEARNED
    seen = last.counts if last is not None else {}

    def view(o: ObservedJob, shown: str, nodes: tuple[NodeSlice, ...]) -> dict[str, Any] | None:
        r = o.job.scale_range
        if r is None:
            return None
        lo, hi = int(r[0]), int(r[1])
        by_count = count_rows(memory, o.job, rows, usable, biggest) if rows is not None else None
        own = memory.measured.get(o.job.id, {})
        counts: list[dict[str, Any]] = []
        known: list[int] = []
        for c, row in sorted((by_count or {}).items()):
            prior = rows is not None and rows.filled.has(o.job.job_type, c)
            on = {t for t in own.get(c, {}) if t in usable}
            if not on:
                backed = "prior"
            elif rows is None or not prior:
                backed = "measured, no prior"
            else:
                table = rows.row(o.job.job_type, c)
                have = {t for t, v in table.items() if v > 0 and t in usable}
                backed = "measured" if have <= on else "partly measured"
            known.append(c)
            counts.append(
                {"gpus": c, "steps_per_s": cluster_value(row, usable), "backed_by": backed}
            )
        was = running_count(o)
        if shown in RUNS:
            count = sum(s.gpus for s in nodes) if shown == "starting" and nodes else was
            run = "this"
        else:
            count, run = _next_count(memory.jobs.get(o.job.id), o), "next"
        if shown == "skipped" or o.waiting_on:
            chosen, count = "not-chosen", None
        elif shown in ("running", "kept", "preempted"):
            chosen = "running"
        elif shown == "starting" and o.state is JobState.RUNNING:
            chosen = "regrow" if count != was else "moved"
        elif joint and known:
            chosen = "joint"
        elif untried and not joint and count is not None and count > max(known, default=lo):
            chosen = "untried"
        elif not known:
            chosen = "no-rows"
        else:
            chosen = "least" if count == min(known) else "grown"
        limit = _limit(chosen, count, hi, known, biggest)
        if limit == "running" and count is not None and not any(k > count for k in known):
            # nothing says a larger count is faster: no restart could pay for one
            limit = "untried-running" if untried else "rows"
        elif limit == "running" and o.steps_done is None:
            limit = "no-progress"
        return {
            "range": [lo, hi],
            "count": count,
            "run": run,
            "last_count": _last(shown, o, was, seen),
            "chosen": chosen,
            "limit": limit,
            "largest_type_gpus": biggest,
            "counts": counts,
        }

    return view


def _last(shown: str, o: ObservedJob, was: int | None, seen: dict[JobId, int]) -> int | None:
    """The GPUs of its last run: for a job (re)starting or waiting (None for one whose
    run goes on: its count is that run's)."""
    if shown in ("running", "kept", "preempted"):
        return None
    return was if was is not None else seen.get(o.job.id)


def _next_count(hit: tuple[Any, int, Any] | None, o: ObservedJob) -> int:
    """The count the round chose for a waiting job (mold_round.MoldMemory.jobs holds
    those other than the job's own scale factor)."""
    return int(hit[1]) if hit is not None else o.job.scale_factor


def _limit(chosen: str, count: int | None, hi: int, known: list[int], biggest: int) -> str | None:
    if count is None or count >= hi or chosen in ("not-chosen", "no-rows"):
        return None
    if chosen in ("running", "moved"):
        return "capacity" if count >= biggest else "running"
    if chosen == "untried":
        return "capacity" if count >= biggest else "share"
    if any(k > count for k in known):
        return "share"
    return "capacity" if count >= biggest else "rows"
