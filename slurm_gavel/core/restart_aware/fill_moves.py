"""When a running fill may move to another fill (restart-aware rounds; restart_aware.py's
module doc has the whole rule set and docs/design.md §1.3 the reasons).

A *fill* is a run on a GPU type its job's allocation gives no time to: Gavel's
mechanism puts a job there only on GPUs nobody with a positive fraction wants (work
conservation), and ranks a job's fill entries by the time it received on each type
since the allocation was computed, least first. A fill that runs on type A therefore
ranks its entry on another unbacked type B ahead of A's as soon as it has received
more on A than on B, and moves to B if a B GPU is spare; two rounds later it moves back
(EXPERIMENTS.md, "Two restart patterns": Philly 2017-10-24, one 8-GPU job, k80 <-> p100,
35 restarts in 7 h). With free restarts that costs nothing; with a restart cost c it
costs c of every move, 300 s of a 360 s round at 300 s.

The rule: a running fill whose restarts cost leaves its type for another fill only
when the move pays its restart over the stay it can expect there. Over a stay of S
seconds on B it does r_B (S - c) steps (the restart's c first), against r_A S staying
on A, so the move pays when

    r_B (S - c) > r_A S.

S is what the round knows of the run it would start: the span over which the
restart-aware rounds count a restart as paid for, c / b (a protected run's shortest
lease; b the restart budget), or less where the job's remaining work at B's rate
(declared total steps less those done) ends sooner. A fill is never protected, so it
may be displaced before S by a job the allocation wants on B; c / b is the stay the
budget asks every restart to be paid by, not a forecast tuned to a trace. Moves between
alike types (|r_B / r_A - 1| small) and every move to a slower type never pay, so no
fill can move A -> B -> A while its rates stand; a move to a much faster type pays.

It only ever removes moves: a fill's entry on B whose move does not pay is ranked right
after its entry on A (as if it had received as much on B as on A), never earlier than
in Gavel's order, and every other job's entry keeps its place. So if A's GPU goes to
an entry that outranks the fill's there, the fill still moves to B (it has to), and
with free restarts (c = 0) or for a job that is not running, the order is Gavel's.

The rates are the job's throughput row: the table's, or learned from the job's own
progress reports in the daemon, so user input. A rate, restart cost or remaining work
that is not a finite number makes the move not pay (the fill stays), which can only
keep the job on A where Gavel would have moved it; its entry on A keeps Gavel's rank,
so it cannot hold A against any entry that outranks it there. An inflated rate on B
makes a move pay, which is Gavel's order, no more. Either way no fill moves or stays
more than Gavel's mechanism lets it.

Pure functions over plain data.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Mapping

from slurm_gavel.core.mechanism import MechanismJob, _Ranked, _select
from slurm_gavel.core.restart_aware.restart_backing import RestartCost, time_left
from slurm_gavel.core.scheduler_state import JobAccount
from slurm_gavel.domain.model import GpuType, Job, JobId

# Whether the job, running as a fill on the first type, should move to a fill on the
# second one (move_pays with the job's rates, restart cost and expected stay).
MovePays = Callable[[JobId, GpuType, GpuType], bool]


def move_pays(rate_here: float, rate_there: float, cost: float, stay: float) -> bool:
    """Whether moving pays its restart (module doc): ``rate_there`` (stay - cost) >
    ``rate_here`` stay. False where any figure is not a finite number, or for a stay no
    longer than the restart; True for a free restart (cost 0) whatever the rates."""
    figures = (rate_here, rate_there, cost, stay)
    if not all(math.isfinite(v) for v in figures):
        return False
    if cost <= 0.0:
        return True
    if stay <= cost or rate_there <= 0.0:
        return False
    return rate_there * (stay - cost) > rate_here * stay


def expected_stay(paid_for: float, time_left: float) -> float:
    """The stay a move is priced over (module doc): ``paid_for`` (c / b), or the job's
    remaining time at the new type's rate where that is shorter and known (a time left
    that is not a number, as for a job that declares no total, does not shorten it)."""
    if math.isnan(time_left):
        return paid_for
    return min(paid_for, time_left)


def fill_move_pays(
    jobs: Mapping[JobId, MechanismJob],
    by_id: Mapping[JobId, Job],
    accounts: Mapping[JobId, JobAccount],
    cost: RestartCost,
    budget: float,
) -> MovePays:
    """move_pays with each job's rates (its mechanism row), restart cost and expected
    stay (c / b, or its remaining time at the new type's rate if shorter)."""

    def pays(job_id: JobId, here: GpuType, there: GpuType) -> bool:
        job = by_id[job_id]
        account = accounts.get(job_id)
        c = cost(job)
        row = jobs[job_id].throughput
        r_here = float(row.get(here, 0.0))
        r_there = float(row.get(there, 0.0))
        paid_for = c / budget if c > 0.0 and budget > 0.0 else 0.0
        stay = expected_stay(paid_for, time_left(job, account, r_there))
        return move_pays(r_here, r_there, c, stay)

    return pays


def fills_stay(
    ranked: list[_Ranked], pays: MovePays, exempt: Collection[JobId] = ()
) -> tuple[list[_Ranked], dict[JobId, GpuType]]:
    """The mechanism's ranking with each running fill's entries on other unbacked types
    whose move does not pay (``pays`` False) ranked right after its entry on the type
    it runs on, where Gavel's order had them before it (module doc), and those fills
    (job -> the type it runs on); the rest keeps its order, and so do the fills in
    ``exempt``. A fill is a job whose entry on the type it runs on has fraction 0."""
    fill_on: dict[JobId, GpuType] = {}
    for k in ranked:
        members = k[6]
        if len(members) == 1 and k[2] == 0.0 and k[3] == -1 and members[0] not in exempt:
            fill_on[members[0]] = k[5]  # fraction 0, runs here
    if not fill_on:
        return ranked, {}
    out: list[_Ranked] = []
    held: dict[JobId, list[_Ranked]] = {}
    staying: dict[JobId, GpuType] = {}
    seen: set[JobId] = set()  # fills whose entry on their own type is out already
    for k in ranked:
        members = k[6]
        job = members[0]
        here = fill_on.get(job) if len(members) == 1 else None
        if here is None:
            out.append(k)
        elif k[5] == here:
            out.append(k)
            seen.add(job)
            out.extend(held.pop(job, ()))
        elif job not in seen and k[2] == 0.0 and not pays(job, here, k[5]):
            held.setdefault(job, []).append(k)
            staying[job] = here
        else:
            out.append(k)
    return out, staying


def select_staying(
    ranked: list[_Ranked],
    jobs: Mapping[JobId, MechanismJob],
    capacity: Mapping[GpuType, int],
    pays: MovePays,
) -> tuple[list[_Ranked], list[int]]:
    """mechanism._select over fills_stay's order, and that order. A fill held back
    that does not get its own type after all (an entry that outranks it there took the
    GPU) had no stay to weigh a move against: its entries go back to Gavel's order
    and the selection is made again, until every fill held back stays (at most once
    per fill, as each round only adds to those let go)."""
    exempt: set[JobId] = set()
    while True:
        order, staying = fills_stay(ranked, pays, exempt)
        chosen = _select(order, jobs, capacity)
        kept = {
            order[i][6][0]
            for i in chosen
            if len(order[i][6]) == 1 and staying.get(order[i][6][0]) == order[i][5]
        }
        lost = staying.keys() - kept
        if not lost:
            return order, chosen
        exempt |= lost
