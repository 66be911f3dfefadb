"""When a changed throughput row is worth a new allocation, and when a new allocation
keeps the mechanism's accounting.

A job's row changes while it runs: its progress reports replace its prior's cells
(job_rows.py), an exploration budget ends, an estimate is refitted. The allocation in
force was computed with the rows of its time. Re-solving at every such change is what
the daemon once did (every job's first report on every type changed the job-set key),
and it stopped running jobs to start others in rounds where nothing arrived or finished
and the measured rates equalled the prior's within 0.1 %; reallocating on every first
report also cost 4.0 % average JCT over the oracle against 2.3 % for waiting for the
next arrival or completion (EXPERIMENTS.md, "What learning costs"). Never re-solving,
on the other hand, leaves a long job on a type its measurements show is wrong for it
until something else happens.

:func:`rows_misjudged` is the rule between the two, the same for the daemon and the
simulator: the allocation is re-solved for new rows only when, summed over the jobs it
misjudges by more than measurement noise (MISJUDGED), the time at stake (how far off
the allocation's idea of the job's rate is, times the job's remaining time) exceeds
PAYBACK times the restarts those jobs would cost. A measurement that confirms its
prior, within noise, never re-solves. :func:`keeps_accounting` says when a new
allocation keeps the mechanism's epoch accounting: any re-solve for the same jobs (a
row change, the period). Gavel resets it at every new allocation, which made every
re-solve, even one that repeated the allocation, reshuffle the priorities and move
jobs; kept, the priorities go on measuring each job's time since the job set last
changed against its new fractions, so a repeat moves nothing and a small change moves
few. Measured on the 1,000-job trace of EXPERIMENTS.md ("What learning costs", seed 0,
10 % noise, 30 s start-up): resetting unless every fraction moved by at most 0.05 gave
learned 93.1 h against the oracle's 82.5 h; keeping it 77.4 h. Pure functions, no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

from slurm_gavel.domain.model import Allocation, GpuType, JobId

# A job's rate under its allocation may be misjudged by this share before it counts:
# measurement noise (the job library's window, a loaded node's pacing, emulated speeds)
# is a few percent live and 10 % in the simulator's noise model; below this, a re-solve
# would chase noise.
MISJUDGED = 0.15
# The time at stake must pay for this many times the misjudged jobs' restart costs: a
# re-solve moves the misjudged jobs and, in general, about as many others.
PAYBACK = 2.0
Row = Mapping[GpuType, float]


def rate_under(fractions: Mapping[GpuType, float], row: Row) -> float:
    """Steps/s a job gets on average from its allocation's fractions at ``row``."""
    return sum(x * row.get(t, 0.0) for t, x in fractions.items())


# The policies whose allocation a uniform factor on one job's row cannot change: they
# divide each job's throughput by its own (its rate on its share of the cluster), so
# only the ratios between its cells count. For them a row change is judged at the
# row's own level (rows_misjudged): else a job whose steps are counted in another unit
# (every figure ten times larger: its word, which the policy cancels out) would look
# misjudged tenfold at its first measurement and force a re-solve that moves everyone.
LEVEL_FREE_POLICIES = frozenset(
    {"max_min_fairness", "max_min_fairness_packed", "hierarchical_max_min_fairness"}
)


def level(row: Row) -> float:
    """The geometric mean of a row's positive cells (1.0 with none): its level."""
    logs = [math.log(v) for v in row.values() if v > 0.0 and math.isfinite(v)]
    return math.exp(sum(logs) / len(logs)) if logs else 1.0


def rows_misjudged(
    allocation: Allocation,
    used: Mapping[JobId, Row],
    now_rows: Iterable[tuple[JobId, Row, float | None, float, float]],
    *,
    level_free: bool = False,
) -> bool:
    """True when the rows changed since ``allocation`` was computed (``used``: each
    job's row then) by enough to pay for a re-solve (module doc). ``now_rows``: per
    considered job, its id, its row now, its steps left (None: it declared no total,
    as most jobs on Slurm do), the seconds it has run (what a job of unknown length is
    expected to run still: the longer a job has run, the longer it is likely to go on)
    and one restart's seconds. ``level_free``: the policy cannot see a row's level
    (LEVEL_FREE_POLICIES), so each row is judged at its own level."""
    stake = cost = 0.0
    for job_id, row, steps_left, attained_s, restart_s in now_rows:
        before = used.get(job_id)
        fractions = allocation.fractions.get(job_id)
        if before is None or not fractions or before is row:
            continue
        old, new = rate_under(fractions, before), rate_under(fractions, row)
        if not (old > 0.0 and new > 0.0):
            continue
        error = abs(new / old - 1.0)
        if level_free:
            error = abs((new / level(row)) / (old / level(before)) - 1.0)
        if error <= MISJUDGED:
            continue
        remaining_s = attained_s if steps_left is None else steps_left / new
        stake += error * remaining_s
        cost += max(restart_s, 0.0)
    return stake > 0.0 and stake > PAYBACK * cost


def keeps_accounting(old: Allocation | None, new: Allocation) -> bool:
    """True when the mechanism's epoch accounting carries over from ``old`` to ``new``:
    both for the same jobs (the caller checks the job-set key too), neither with pairs
    (space sharing keeps Gavel's reset: its pair keys are the accounting's entries)."""
    if old is None or old.pairs or new.pairs:
        return False
    return old.fractions.keys() == new.fractions.keys()
