"""The round mechanism: an allocation (fractions of time per GPU type) -> this round's placement.

Gavel's rule (scheduler.py, _update_priorities / _schedule_jobs_on_workers):

* priority(entry, type) = X[entry][type] / share of time the entry received on that
  type since the allocation was computed. An entry is a job or a space-sharing
  pair (the allocation has pairs only under space sharing: space_sharing_plugin.SpaceSharing
  gives the policy their throughputs). Entries that never ran on a type they are
  allocated to have priority inf; entries with X = 0 on a type have priority 0 and
  only fill GPUs nobody with a positive priority wants (work conservation, as Gavel
  does). Ties break on the deficit (X * elapsed - received), then on X.
* Walk the (entry, type) list by priority; place an entry if none of its jobs is
  placed yet, its throughput there is > 0 and enough GPUs of the type are left.
* Then choose nodes per type (node_placement.py): jobs placed on the type they
  already run on keep their nodes when those are still free (lease extension: no
  restart); the rest, largest first, go on the fewest nodes (best fit), and a job
  that has to spread is marked unconsolidated so the table's unconsolidated
  throughput applies.

Optional, not Gavel (stay_credit_seconds > 0, default 0): the type a job runs on
counts that many seconds less received time in its priority and deficit, so a job
with a fractional allocation (say 0.5 v100 + 0.5 p100) works it off in longer
stints instead of switching type almost every round. The caller decides when to
apply it (mechanism_plugin.stay_credit: only in underloaded rounds, where it cannot keep a
waiting job off a GPU). Space-sharing pairs get no credit.

Pure functions over plain data: no clock, no I/O, no randomness.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import NamedTuple

from slurm_gavel.core.node_placement import place_chosen  # step 3 of the docstring
from slurm_gavel.domain.cluster_model import JobPlacement, Node
from slurm_gavel.domain.model import Allocation, GpuType, JobId

INF = math.inf


def pair_key(a: JobId, b: JobId) -> str:
    """Accounting key of a space-sharing pair (order-independent)."""
    x, y = sorted((a, b))
    return f"{x}+{y}"


@dataclass(frozen=True)
class MechanismJob:
    """What the mechanism needs to know about one job this round."""

    id: JobId
    scale_factor: int
    throughput: Mapping[GpuType, float]  # steps/s alone; <= 0 means it cannot run there
    current: JobPlacement | None = None  # where it runs now, if it runs
    # The only nodes it may use (its own request: cluster_model.Allowed); None: any.
    nodes: frozenset[str] | None = None
    # Nodes it would rather have (--prefer): tried first among those; None: no wish.
    prefer: frozenset[str] | None = None
    # The exact node count its request asks for (model.Job.node_count); None: any.
    node_count: int | None = None


class Entry(NamedTuple):
    """One schedulable unit on one GPU type: a job, or a pair sharing GPUs."""

    key: str
    jobs: tuple[JobId, ...]
    gpu_type: GpuType
    fraction: float
    priority: float
    deficit: float


def priority(fraction: float, received: float, elapsed: float) -> float:
    """Gavel's priority of an entry on a GPU type (the module docstring): its
    fraction there over the share of the ``elapsed`` seconds since the allocation
    was computed that it ``received`` there; INF where allocated and not run there
    (or no time has passed), 0 where not allocated.

    The formula's one home: `slurm-gavel status` and `explain` compute a job's
    figures with it from the view (status_view.job_figures). _ranked, the
    simulator's hottest loop, writes the same expression inline (no call per job and
    type); a test holds the two equal."""
    if fraction <= 0.0:
        return 0.0
    if received <= 0.0 or elapsed <= 0.0:
        return INF
    return fraction / (received / elapsed)


def deficit(fraction: float, received: float, elapsed: float) -> float:
    """The entry's deficit on a GPU type, the tie-break after the priority: the
    seconds its fraction entitles it to since the allocation, less those received
    (positive: owed time). Inline in _ranked as priority() is."""
    return fraction * elapsed - received


# A ranked candidate before it becomes an Entry: (-priority, -deficit, -fraction,
# -runs_here, key, type, members). (key, type) is unique, so sorting never compares
# the members; -(-v) == v exactly, so the Entry fields come back unchanged.
_Ranked = tuple[float, float, float, int, str, GpuType, tuple[JobId, ...]]


def entries(
    allocation: Allocation,
    jobs: Mapping[JobId, MechanismJob],
    received: Mapping[str, Mapping[GpuType, float]],
    elapsed: float,
    gpu_types: Iterable[GpuType],
    stay_credit_seconds: float = 0.0,
) -> list[Entry]:
    """All (entry, type) candidates with their priority, highest first.

    `received[key][type]` is the time the entry ran on the type since the
    allocation was computed and `elapsed` the wall time since then. Among equal
    priorities, deficits and fractions, the entry already running on the type
    goes first (keeping it avoids a restart), then the order of keys.
    stay_credit_seconds: see the module docstring (0 = Gavel).
    """
    ranked = _ranked(allocation, jobs, received, elapsed, list(gpu_types), stay_credit_seconds)
    return [_entry(k) for k in ranked]


def _entry(k: _Ranked) -> Entry:
    return Entry(k[4], k[6], k[5], -k[2], -k[0], -k[1])


# The round-independent part of ranking: per job, its id, members and the (type,
# fraction) of every type it can run on. Fixed while the allocation and the job set
# are, so the scheduler computes it once per allocation instead of every round.
SingleCandidates = list[tuple[JobId, tuple[JobId, ...], list[tuple[GpuType, float]]]]


def single_candidates(
    allocation: Allocation, jobs: Mapping[JobId, MechanismJob], types: list[GpuType]
) -> SingleCandidates:
    out: SingleCandidates = []
    empty: Mapping[GpuType, float] = {}
    fractions = allocation.fractions
    for job_id, job in jobs.items():
        row = fractions.get(job_id, empty)
        tput = job.throughput
        runs_on = [(t, float(row.get(t, 0.0))) for t in types if tput.get(t, 0.0) > 0.0]
        out.append((job_id, (job_id,), runs_on))
    return out


def _ranked(
    allocation: Allocation,
    jobs: Mapping[JobId, MechanismJob],
    received: Mapping[str, Mapping[GpuType, float]],
    elapsed: float,
    types: list[GpuType],
    stay_credit_seconds: float = 0.0,
    singles: SingleCandidates | None = None,
) -> list[_Ranked]:
    """The sort keys of entries(), sorted. This runs for every job and type in every
    round (the simulator's hottest path), hence plain tuples and no helper calls
    (priority() and deficit() written inline: tests hold them equal).
    `singles`: single_candidates() of the same allocation, jobs and types, if known."""
    keyed: list[_Ranked] = []
    empty: Mapping[GpuType, float] = {}
    append = keyed.append
    no_time = elapsed <= 0.0
    credit = stay_credit_seconds > 0.0
    if singles is None:
        singles = single_candidates(allocation, jobs, types)
    for job_id, members, options in singles:
        got_row = received.get(job_id, empty)
        current = jobs[job_id].current
        cur = current.gpu_type if current is not None else None
        for t, x in options:
            got = got_row.get(t, 0.0)
            if credit and cur == t:
                got = max(0.0, got - stay_credit_seconds)  # the incumbent keeps its type longer
            if x <= 0.0:
                prio = 0.0
            elif got <= 0.0 or no_time:
                prio = INF
            else:
                prio = x / (got / elapsed)
            append((-prio, -(x * elapsed - got), -x, -1 if cur == t else 0, job_id, t, members))
    for pair in allocation.pairs:
        a, b = pair.jobs
        if a not in jobs or b not in jobs:
            continue
        key = pair_key(a, b)
        cur_a = jobs[a].current
        got_row = received.get(key, empty)
        for t, xt in pair.fractions.items():
            if xt > 0.0 and t in types:
                here = 1 if cur_a is not None and cur_a.gpu_type == t and cur_a.partner == b else 0
                x = float(xt)
                got = got_row.get(t, 0.0)
                prio = INF if got <= 0.0 or no_time else x / (got / elapsed)
                append((-prio, -(x * elapsed - got), -x, -here, key, t, (a, b)))
    keyed.sort()
    return keyed


def select(
    ranked: list[Entry], jobs: Mapping[JobId, MechanismJob], capacity: Mapping[GpuType, int]
) -> list[Entry]:
    """Greedy pick in priority order: each job at most once, within GPUs per type."""
    keys = [(-e.priority, -e.deficit, -e.fraction, 0, e.key, e.gpu_type, e.jobs) for e in ranked]
    picked = _select(keys, jobs, capacity)
    return [ranked[i] for i in picked]


def _select(
    ranked: list[_Ranked], jobs: Mapping[JobId, MechanismJob], capacity: Mapping[GpuType, int]
) -> list[int]:
    """select() over sort keys; returns the indices of the chosen candidates."""
    left = dict(capacity)
    gpus_left = sum(left.values())
    placed: set[JobId] = set()
    chosen: list[int] = []
    for i, k in enumerate(ranked):
        if gpus_left <= 0:
            break  # nothing else can fit anywhere
        members = k[6]
        if len(members) == 1:
            if members[0] in placed:
                continue
            sf = jobs[members[0]].scale_factor
        else:
            if members[0] in placed or members[1] in placed:
                continue
            sf = jobs[members[0]].scale_factor
            if jobs[members[1]].scale_factor != sf:
                continue  # Gavel only packs jobs of the same size
        t = k[5]
        if sf > left.get(t, 0):
            continue
        left[t] -= sf
        gpus_left -= sf
        placed.update(members)
        chosen.append(i)
    return chosen


def place_on_nodes(
    chosen: list[Entry], jobs: Mapping[JobId, MechanismJob], nodes: Iterable[Node]
) -> dict[JobId, JobPlacement]:
    """Pick nodes for the chosen entries, type by type (node_placement.py)."""
    return place_chosen([(e.key, e.jobs, e.gpu_type) for e in chosen], jobs, nodes)


def assign(
    allocation: Allocation,
    jobs: Mapping[JobId, MechanismJob],
    nodes: Iterable[Node],
    received: Mapping[str, Mapping[GpuType, float]],
    elapsed: float,
    stay_credit_seconds: float = 0.0,
    singles: SingleCandidates | None = None,
) -> dict[JobId, JobPlacement]:
    """This round's placement for every job that runs (absent jobs do not run).
    stay_credit_seconds: see the module docstring (0 = Gavel). singles: see _ranked."""
    node_list = list(nodes)
    capacity: dict[GpuType, int] = {}
    for n in node_list:
        capacity[n.gpu_type] = capacity.get(n.gpu_type, 0) + n.usable_gpus
    ranked = _ranked(
        allocation, jobs, received, elapsed, list(capacity), stay_credit_seconds, singles
    )
    chosen = []
    for i in _select(ranked, jobs, capacity):
        k = ranked[i]
        chosen.append((k[4], k[6], k[5]))
    return place_chosen(chosen, jobs, node_list)
