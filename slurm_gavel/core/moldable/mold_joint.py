"""The moldable count chosen inside the LP (``moldable_lp``; docs/design.md
§1.2.2): an alternative to moldable.py's least-first + grow-into-idle choice.

Every job the round allocates (rigid ones at their one count) goes into one max-min LP
over (GPU type, count) (policies/solvers/mold_lp.py), each job's rate at count c on
type t from its row at that scale factor (the table's prior, the job's own measured
cells: mold_round.count_rows); the count of each waiting job is the one its allocation
gives time to (pick_counts). The policy's LP and the mechanism then run as before with
these counts as scale factors, and a job above its least count only on the GPU types
its joint allocation gives it time on at that count: a count is chosen for a type (LM
at 2 GPUs is 2x one V100 but slower than one P100), and the rigid LP must not spend it
on another.

A running job keeps its count while it runs: in the LP it may take its count or a
larger one (it never shrinks while running; the mechanism preempts it as any job and
it comes back at the count chosen then), and it moves to the larger count only when
the time that saves on its steps left pays RESTART_WORTH times its restart cost
(moldable.py, 3.): the count change is a restart, priced like any move.

Pure; the last answer is kept while the LP's input stays the same (JointMemo).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from slurm_gavel.core.moldable.moldable import RESTART_WORTH, MoldJob, cluster_value
from slurm_gavel.domain.model import GpuType, JobId
from slurm_gavel.policies import (
    CountJob,
    allocate_counts,
    count_types,
    pick_counts,
)

Rows = Mapping[int, Mapping[GpuType, float]]


@dataclass
class JointMemo:
    """The last LP's input and the counts it gave (a quiet round re-solves nothing)."""

    key: tuple[object, ...] | None = None
    counts: dict[JobId, int] = field(default_factory=dict)
    types: dict[JobId, frozenset[GpuType]] = field(default_factory=dict)


@dataclass(frozen=True)
class JointChoice:
    """Each job's count, and for a job above its least count the GPU types its
    allocation gives it time on at that count (the round runs it there only)."""

    counts: dict[JobId, int]
    types: dict[JobId, frozenset[GpuType]]


def request_norm(rates: Rows, request: int, capacity: Mapping[GpuType, int]) -> float:
    """P_j: the job's rate at its request averaged over the cluster's GPUs; without a row
    at the request, the nearest count's scaled linearly to it (1.0 if nothing is known)."""
    if request in rates:
        v = cluster_value(rates[request], capacity)
    elif rates:
        c = min(rates, key=lambda c: (abs(c - request), c))
        v = cluster_value(rates[c], capacity) * request / c
    else:
        v = 0.0
    return v if v > 0 else 1.0


def choose_joint(
    mold: Sequence[MoldJob],
    rates: Mapping[JobId, Rows],
    requests: Mapping[JobId, int],
    weights: Mapping[JobId, float],
    capacity: Mapping[GpuType, int],
    memo: JointMemo | None = None,
) -> JointChoice:
    """Each job's count this round (module doc). ``rates``: per job, its row at each
    count it may take; ``requests``: its rigid count; ``weights``: priority weights."""
    usable = {t: g for t, g in capacity.items() if g > 0}
    cjobs: list[CountJob] = []
    for m in mold:
        r = dict(rates[m.id])
        if m.fixed is not None:
            r = {c: row for c, row in r.items() if c >= m.fixed}
            if m.fixed not in r:  # nothing known at its count: it stays there
                r = {m.fixed: dict.fromkeys(usable, 1.0)}
        n = requests[m.id]
        cjobs.append(CountJob(m.id, r, n, request_norm(rates[m.id], n, usable), weights[m.id]))
    key = (
        tuple(sorted(usable.items())),
        tuple((j.id, j.rates, j.request, j.weight) for j in cjobs),
    )
    if memo is not None and memo.key == key:
        picked, on = memo.counts, memo.types
    else:
        alloc = allocate_counts(cjobs, usable)
        picked = pick_counts(cjobs, alloc)
        on = count_types(alloc, picked)
        if memo is not None:
            memo.key, memo.counts, memo.types = key, picked, on
    out: dict[JobId, int] = {}
    types: dict[JobId, frozenset[GpuType]] = {}
    for m, j in zip(mold, cjobs, strict=True):
        c = picked[m.id]
        if m.fixed is not None and c != m.fixed and not _pays(m, c):
            c = m.fixed
        out[m.id] = c
        if c != m.fixed and c > min(j.rates) and on.get(m.id):
            types[m.id] = on[m.id]
    return JointChoice(out, types)


def _pays(m: MoldJob, to: int) -> bool:
    """A running job's move to count ``to`` saves RESTART_WORTH x its restart cost."""
    assert m.fixed is not None
    v_now, v_new = m.value.get(m.fixed, 0.0), m.value.get(to, 0.0)
    if v_now <= 0 or v_new <= v_now or m.steps_left <= 0:
        return False
    return m.steps_left * (1 / v_now - 1 / v_new) >= RESTART_WORTH * m.restart_s
