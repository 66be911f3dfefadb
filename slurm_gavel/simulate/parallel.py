"""Several simulations at once: one process per run, results in the order asked.

`slurm-gavel simulate` runs every --policy (times every --knowledge, or every rate of
--sweep-rates) on the same trace, one after the other. Each run is independent and
single-threaded (HiGHS's simplex is serial), so a centre comparing eight policies on
its own trace waits eight times as long as for one. With ``workers > 1`` the runs
go to a pool of worker processes instead: the results, and so every table and JSON
summary, are exactly those of the runs one after the other (each run is a pure
function of its inputs; only its ``wall_s`` differs, which ``--no-wall-time`` leaves
null); the first run that fails raises its error here, as it would have alone.

The pool starts its processes with "spawn": a fresh interpreter per worker, never a
fork of this one, so nothing a caller's threads hold (a progress bar, a logger, a
solver's thread pool) is copied half-locked into a child, on every platform and
Python release alike. That costs each worker one interpreter start and the
simulator's imports (~0.5 s), once, not per run.
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, replace

from slurm_gavel.domain.cluster_model import Node
from slurm_gavel.domain.model import GpuType, Job
from slurm_gavel.domain.throughputs import ThroughputTable
from slurm_gavel.errors import InputError
from slurm_gavel.simulate.engine import SimulationOptions, SimulationResult, simulate


@dataclass(frozen=True)
class Run:
    """The arguments of one simulate() call."""

    jobs: Sequence[Job]
    nodes: Sequence[Node]
    table: ThroughputTable
    policy: str
    options: SimulationOptions
    true_rows: Mapping[str, Mapping[GpuType, float]] | None = None


def available_cpus() -> int:
    """CPUs this process may run on (its affinity mask, as Slurm's cgroup sets it on
    a compute node), not every CPU the machine has."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # (no affinity call on this platform)
        return max(1, os.cpu_count() or 1)


def resolve_workers(requested: int) -> int:
    """``--workers N``: N >= 1 as given, 0 for one per available CPU."""
    if requested < 0:
        raise InputError(
            f"--workers {requested}: give a number of processes >= 1, or 0 for one per CPU"
        )
    return available_cpus() if requested == 0 else requested


def run_one(run: Run) -> SimulationResult:
    return simulate(run.jobs, run.nodes, run.table, run.policy, run.options, run.true_rows)


def run_all(
    runs: Sequence[Run],
    workers: int = 1,
    on_done: Callable[[int], None] | None = None,
) -> list[SimulationResult]:
    """Every run's result, in the order of ``runs``; with ``workers > 1`` (and more than
    one run) in that many processes. ``on_done(i)`` is called as run ``i``'s result is
    taken, in the order of ``runs``. A failed run raises its error once the runs before
    it have finished: the error, and the runs that completed, are those of the runs
    one after the other (no run after it is started any more)."""
    if workers <= 1 or len(runs) <= 1:
        out = []
        for i, run in enumerate(runs):
            out.append(run_one(run))
            if on_done is not None:
                on_done(i)
        return out
    # A worker's progress bar would interleave with the others' on one terminal.
    quiet = [replace(r, options=replace(r.options, progress=False)) for r in runs]
    context = multiprocessing.get_context("spawn")
    pool = ProcessPoolExecutor(max_workers=min(workers, len(runs)), mp_context=context)
    try:
        futures = [pool.submit(run_one, r) for r in quiet]
        out = []
        for i, fut in enumerate(futures):
            out.append(fut.result())
            if on_done is not None:
                on_done(i)
    except BaseException:
        pool.shutdown(wait=True, cancel_futures=True)  # the runs going finish, no new one
        raise
    pool.shutdown(wait=True)
    return out
