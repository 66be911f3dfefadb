"""The domain: plain dataclasses shared by policies, the mechanism, the simulator and the daemon.

Two views of a job exist on purpose:

* :class:`Job` is the workload as a user submitted it (type, GPUs, steps, arrival).
  The simulator and the daemon keep these.
* :class:`ProblemJob` is what an allocation policy sees for one round: the job's
  throughput on every GPU type already looked up, plus its progress. It is exactly
  one entry of the problem JSON (docs/design.md §2.1), so `slurm-gavel allocate` and the
  round loop feed policies the same thing.

GPU types are plain strings everywhere ("v100", "a100", "mi250x", ...): no code
path knows a fixed list of them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

GpuType = str
JobId = str


@dataclass(frozen=True)
class Job:
    """A training job as submitted: what it is and how much work it has."""

    id: JobId
    job_type: str
    scale_factor: int = 1  # GPUs the job needs, all of one type
    priority_weight: float = 1.0
    total_steps: float = 0.0
    arrival_time: float = 0.0  # seconds from the start of the trace / daemon epoch
    account: str | None = None
    slo: float | None = None  # seconds after arrival by which the job should finish
    # Slurm QOS: the admin's weight for it (slurm_gavel/core/priority_weights.py)
    qos: str | None = None
    # Who submitted it and where (Slurm's user name, partition list): shown by
    # `slurm-gavel status`, never used to schedule.
    user: str | None = None
    partition: str | None = None
    # Seconds each restart of this job costs (checkpoint + restore), where the trace
    # says so (its `overhead` column); None: the simulator's per-type or global figure.
    restart_overhead: float | None = None
    # Moldable: the GPU counts it may run at, (min, max); None: only
    # scale_factor. Its count is chosen at each (re)start (core/moldable/moldable.py), and the
    # round sees the job with scale_factor set to it (core/moldable/mold_round.py).
    scale_range: tuple[int, int] | None = None
    # The exact number of nodes its request asks for (sbatch -N 2, or its tasks over
    # --ntasks-per-node): its GPUs go scale_factor / node_count on each of that many
    # nodes, every placement (node_placement.py); None: any layout.
    node_count: int | None = None


@dataclass(frozen=True)
class ProblemJob:
    """One job as an allocation policy sees it (one entry of the problem JSON)."""

    id: JobId
    job_type: str
    # steps/s on one unit of each type, where a unit is `scale_factor` GPUs
    # (Gavel's convention); 0 means the job cannot run on that type.
    throughput: Mapping[GpuType, float]
    scale_factor: int = 1
    priority_weight: float = 1.0
    steps_remaining: float | None = None
    time_since_start: float = 0.0
    account: str | None = None
    slo: float | None = None  # seconds from now by which the job must finish

    # Written out instead of generated (as cluster_model.ObservedJob's): a frozen
    # dataclass's __init__ pays an object.__setattr__ per field, and the round builds
    # one of these per considered job at every re-solve. Same signature and instance.
    def __init__(
        self,
        id: JobId,
        job_type: str,
        throughput: Mapping[GpuType, float],
        scale_factor: int = 1,
        priority_weight: float = 1.0,
        steps_remaining: float | None = None,
        time_since_start: float = 0.0,
        account: str | None = None,
        slo: float | None = None,
    ) -> None:
        d = self.__dict__
        d["id"], d["job_type"], d["throughput"] = id, job_type, throughput
        d["scale_factor"], d["priority_weight"] = scale_factor, priority_weight
        d["steps_remaining"], d["time_since_start"] = steps_remaining, time_since_start
        d["account"], d["slo"] = account, slo


@dataclass(frozen=True)
class PairThroughput:
    """Throughputs when a job of type `a` and one of type `b` share the same GPUs."""

    a: str
    b: str
    scale_factor: int
    throughput: Mapping[GpuType, tuple[float, float]]  # (a's, b's) per GPU type


@dataclass(frozen=True)
class Problem:
    """Everything a policy needs for one allocation: the problem JSON as data."""

    cluster: Mapping[GpuType, int]  # usable GPUs per type
    jobs: tuple[ProblemJob, ...]
    pair_throughputs: tuple[PairThroughput, ...] = ()
    accounts: Mapping[str, float] = field(default_factory=dict)  # entity weights
    prices: Mapping[GpuType, float] = field(default_factory=dict)  # per GPU-hour

    @property
    def gpu_types(self) -> list[GpuType]:
        """GPU types in a stable order (as given in the cluster mapping)."""
        return list(self.cluster)

    def job(self, job_id: JobId) -> ProblemJob:
        for j in self.jobs:
            if j.id == job_id:
                return j
        raise KeyError(job_id)


@dataclass(frozen=True)
class PairShare:
    """Fraction of time two jobs spend sharing the same GPUs, per GPU type."""

    jobs: tuple[JobId, JobId]
    fractions: Mapping[GpuType, float]


@dataclass(frozen=True)
class SolverFallback:
    """An LP that a decomposition (policies/solvers/dw.py and its users) handed to the
    plain LP: `lp` names it (max_min, max_sum, stretch, ...), `reason` is a fixed
    code (dw.REASONS and a few more: the daemon counts fallbacks by the pair),
    `detail` the message with its numbers."""

    lp: str
    reason: str
    detail: str


@dataclass
class Allocation:
    """X[job][gpu_type] = fraction of wall time the job should run on that type.

    `pairs` hold the space-sharing fractions: while a pair shares GPUs, both jobs
    run, and the pair occupies one job's worth of GPUs.
    """

    policy: str
    fractions: dict[JobId, dict[GpuType, float]]
    pairs: list[PairShare] = field(default_factory=list)
    objective: float | None = None
    solve_seconds: float = 0.0
    # Free-form facts a policy wants the user to see (e.g. which SLOs were infeasible).
    notes: list[str] = field(default_factory=list)
    # Which path the policy's LPs took (policies.allocate fills both from
    # solvers/solve_paths.py): the LPs solved by decomposition with their certificate
    # met, and those the decomposition handed to the plain LP, with why. Both empty:
    # only plain LPs (or none) ran.
    decomposed: list[str] = field(default_factory=list)
    fallbacks: list[SolverFallback] = field(default_factory=list)

    def job_total(self, job_id: JobId) -> float:
        """Sum of the job's single and paired fractions over all types."""
        total = sum(self.fractions.get(job_id, {}).values())
        for p in self.pairs:
            if job_id in p.jobs:
                total += sum(p.fractions.values())
        return total

    def effective_throughput(self, problem: Problem, job_id: JobId) -> float:
        """Steps/s the job gets on average under this allocation."""
        job = problem.job(job_id)
        rate = sum(
            job.throughput.get(t, 0.0) * x for t, x in self.fractions.get(job_id, {}).items()
        )
        if self.pairs:
            pair_table = pair_lookup(problem)
            for p in self.pairs:
                if job_id not in p.jobs:
                    continue
                a, b = p.jobs
                ja, jb = problem.job(a), problem.job(b)
                tput = pair_table.get((ja.job_type, jb.job_type, ja.scale_factor))
                if tput is None:
                    continue
                idx = 0 if job_id == a else 1
                for t, x in p.fractions.items():
                    rate += tput.get(t, (0.0, 0.0))[idx] * x
        return rate

    def gpus_used(self, problem: Problem) -> dict[GpuType, float]:
        """GPUs of each type the allocation occupies on average (a pair counts once)."""
        sf = {j.id: j.scale_factor for j in problem.jobs}
        used = {t: 0.0 for t in problem.cluster}
        for job_id, row in self.fractions.items():
            for t, x in row.items():
                used[t] = used.get(t, 0.0) + x * sf[job_id]
        for p in self.pairs:
            for t, x in p.fractions.items():
                used[t] = used.get(t, 0.0) + x * sf[p.jobs[0]]
        return used

    def violations(self, problem: Problem, tol: float = 1e-6) -> list[str]:
        """Feasibility problems, as sentences; empty when the allocation is feasible."""
        out: list[str] = []
        for j in problem.jobs:
            total = self.job_total(j.id)
            if total > 1 + tol:
                out.append(f"job {j.id}: fractions sum to {total:.6f} > 1")
            for t, x in self.fractions.get(j.id, {}).items():
                if x < -tol or not math.isfinite(x):
                    out.append(f"job {j.id}: fraction {x} on {t} is not a non-negative number")
        for t, used in self.gpus_used(problem).items():
            cap = problem.cluster.get(t, 0)
            if used > cap * (1 + tol) + tol:
                out.append(f"{t}: {used:.6f} GPUs allocated > {cap} available")
        return out


def pair_lookup(problem: Problem) -> dict[tuple[str, str, int], dict[GpuType, tuple[float, float]]]:
    """(type a, type b, scale factor) -> per-type (a's, b's) throughput, both orders."""
    table: dict[tuple[str, str, int], dict[GpuType, tuple[float, float]]] = {}
    for p in problem.pair_throughputs:
        table[(p.a, p.b, p.scale_factor)] = dict(p.throughput)
        table[(p.b, p.a, p.scale_factor)] = {t: (v[1], v[0]) for t, v in p.throughput.items()}
    return table
