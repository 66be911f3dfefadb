"""The FIFO queue shared by fifo and fifo_agnostic (Gavel's FIFOPolicy, per round).

Jobs are taken in arrival order and each gets whole GPUs (fraction 1.0) of one
type that still has room for its scale factor; the policies differ only in
which type. The first job that finds no room stops the queue (Gavel's FIFO
property: nobody jumps ahead). Arrival order: the problem JSON has no arrival
time, but time_since_start = now - arrival, so we sort by time_since_start,
largest first, and keep the problem's order for ties (Gavel sorts by job id,
which is arrival order there; ids here are free-form strings).

Gavel's agnostic mode keeps last round's placements; a policy here is a pure
function of one problem, and the round mechanism's lease extension is what
keeps a running job where it is. A job that cannot run on any type of this
cluster (no throughput, or more GPUs than any type has) is skipped, not allowed
to block the queue forever, and named in the notes.
"""

from __future__ import annotations

from collections.abc import Callable

from slurm_gavel.domain.model import Allocation, GpuType, Problem, ProblemJob

# (job, types with room for it in cluster order, free GPUs per type) -> chosen type
Chooser = Callable[[ProblemJob, list[GpuType], dict[GpuType, int]], GpuType]


def arrival_order(problem: Problem) -> list[ProblemJob]:
    return sorted(problem.jobs, key=lambda j: -j.time_since_start)  # stable: ties keep order


def fifo_allocate(problem: Problem, name: str, choose: Chooser) -> Allocation:
    types = problem.gpu_types
    free = {t: int(problem.cluster[t]) for t in types}
    fractions = {j.id: {t: 0.0 for t in types} for j in problem.jobs}
    never: list[str] = []
    placed = 0
    blocked: str | None = None
    for job in arrival_order(problem):
        usable = [
            t
            for t in types
            if job.throughput.get(t, 0.0) > 0 and job.scale_factor <= problem.cluster[t]
        ]
        if not usable:
            never.append(job.id)
            continue
        room = [t for t in usable if free[t] >= job.scale_factor]
        if not room:
            blocked = job.id
            break
        t = choose(job, room, free)
        fractions[job.id][t] = 1.0
        free[t] -= job.scale_factor
        placed += 1
    notes = []
    if blocked is not None:
        notes.append(f"queue stops at job {blocked}: no GPU type has room for it this round")
    if never:
        more = " ..." if len(never) > 10 else ""
        notes.append(
            f"{len(never)} job(s) cannot run on any GPU type here and were skipped: "
            f"{', '.join(never[:10])}{more}"
        )
    return Allocation(name, fractions, objective=float(placed), notes=notes)
