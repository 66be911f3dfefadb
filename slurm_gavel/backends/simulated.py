"""A simulated cluster behind the backend interface: nodes, a virtual clock, a trace.

Jobs arrive at their trace time, progress at the throughput table's rate for
their placement (alone on a consolidated set of nodes, spread over more nodes
than necessary = the table's unconsolidated figure, or sharing GPUs with a
partner = the pair figure), and complete at the exact instant their last step
is done, even inside a round. A job that is restarted (resumed after a
preemption, or moved to other GPUs) first pays the checkpoint+restore overhead:
it holds its GPUs but makes no progress for that many seconds (the job's own
``restart_overhead`` where its trace row gives one, else the per-type or global
figure). A first start
pays nothing (there is no checkpoint to load), a kept job pays nothing (lease
extension).

A job may have its own true row (``true_rows``: steps/s per GPU type, the trace's
``throughput_<type>`` columns): it then runs at that rate alone, and spread or shared
at its type's slowdown for that placement (sim_rates.py, the rate model). Which
placements the cluster carries out: sim_placement.py. A running job reports its
rate (``measured_throughput``) once it has run REPORT_AFTER_S past its restore
overhead, alone on consolidated GPUs: what the job library's first progress report
says on Slurm.

Everything is deterministic: no randomness, iteration in sorted order. The nodes
come from a --cluster spec (cluster_spec.py).
"""

from __future__ import annotations

import heapq
import math
import random
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from slurm_gavel.backends.sim_placement import validate
from slurm_gavel.backends.sim_rates import RateModel
from slurm_gavel.core.round_settings import SIMULATOR_DEFAULTS
from slurm_gavel.domain.cluster_model import (
    ActResult,
    ClusterSnapshot,
    JobPlacement,
    JobState,
    Node,
    ObservedJob,
    RoundPlacement,
)
from slurm_gavel.domain.model import GpuType, Job, JobId
from slurm_gavel.domain.throughputs import ThroughputTable

# Seconds a job runs (after its start-up and restore overhead) before its rate is known:
# the job library's report interval (GAVEL_PROGRESS_INTERVAL, 30 s), whose steps_per_s is
# timed over the current run with warm-up left out. Without measurement noise one report
# is the true rate; the round uses it from the next round on.
REPORT_AFTER_S = 30.0


def noisy(rate: float, noise: float, seed: int, job_id: JobId, run: int, gpu: GpuType) -> float:
    """``rate`` as one run's reports give it under the measurement model: times
    exp(noise * z), z standard normal, drawn once per (seed, job, run, GPU type) (a
    run's reports are timed over the whole run, so the run's error is what remains:
    the node's pacing, the data, the neighbours). Deterministic in its arguments."""
    if noise <= 0.0:
        return rate
    z = random.Random(f"{seed}/{job_id}/{run}/{gpu}").gauss(0.0, 1.0)
    return rate * math.exp(noise * z)


@dataclass
class _SimJob:
    job: Job
    steps_done: float = 0.0
    settled_at: float = 0.0  # steps_done is exact at this instant
    placement: JobPlacement | None = None
    rate: float = 0.0  # steps/s while placed, after the overhead
    progress_from: float = 0.0  # restore overhead ends here
    restarts: int = 0
    ran_before: bool = False
    finish_at: float = math.inf
    admitted_at: float = 0.0
    active_integral_at_admission: float = 0.0
    reported: tuple[int, GpuType, float] | None = None  # (run, type, rate) as reported


@dataclass(frozen=True)
class Completion:
    job: Job
    finish_time: float
    restarts: int
    # average number of active jobs (itself included) over its lifetime: the n of
    # its 1/n fair share, for finish-time fairness
    mean_active_jobs: float


class SimulatedCluster:
    """Implements slurm_gavel.domain.cluster_model.ClusterBackend over a virtual clock."""

    def __init__(
        self,
        nodes: Iterable[Node],
        jobs: Iterable[Job],
        table: ThroughputTable,
        *,
        preemption_overhead_seconds: float = SIMULATOR_DEFAULTS.preemption_overhead_seconds,
        overhead_by_job_type: Mapping[str, float] | None = None,
        start_time: float = 0.0,
        true_rows: Mapping[JobId, Mapping[GpuType, float]] | None = None,
        measurement_noise: float = 0.0,
        startup_seconds: float = 0.0,
        seed: int = 0,
    ) -> None:
        if not (math.isfinite(measurement_noise) and measurement_noise >= 0.0):
            raise ValueError(f"measurement_noise {measurement_noise!r}: must be >= 0")
        if not (math.isfinite(startup_seconds) and startup_seconds >= 0.0):
            raise ValueError(f"startup_seconds {startup_seconds!r}: must be >= 0")
        # the measurement model: each run's reported rate is off by its own factor, and
        # every run (the first one too) starts up for startup_seconds without progress
        self.measurement_noise = measurement_noise
        self.startup = startup_seconds
        self.seed = seed
        self.nodes = tuple(nodes)
        self.table = table
        self.true_rows = dict(true_rows or {})
        self.rates = RateModel(table, self.true_rows)  # steps/s on a placement (sim_rates.py)
        self.clock = start_time
        self.overhead = preemption_overhead_seconds
        self.overhead_by_type = dict(overhead_by_job_type or {})
        self._arrivals = sorted(jobs, key=lambda j: (j.arrival_time, j.id))
        self._next_arrival = 0
        self._active: dict[JobId, _SimJob] = {}
        self._running: dict[JobId, _SimJob] = {}
        self._unreported: list[Completion] = []
        self.completions: list[Completion] = []  # drained by the caller (metrics)
        self.busy_gpu_seconds: dict[GpuType, float] = {}
        # GPU-seconds held by restarting jobs before their restore overhead ended (no
        # progress): what restarts cost the cluster (GPU-hours lost to restarts)
        self.restart_gpu_seconds = 0.0
        # moldable jobs (Job.scale_range): GPU count -> (re)starts at that count
        self.counts_at_start: dict[int, int] = {}
        self._node_type = {n.name: n.gpu_type for n in self.nodes}
        self._usable = {n.name: n.usable_gpus for n in self.nodes}  # nodes never change here
        # integral of the number of active jobs over time, for mean contention
        self._active_integral = 0.0
        self._integral_t = start_time

    # ---- the backend interface ---------------------------------------------------------

    def private_data(self) -> str:
        """Slurm's PrivateData for `status_privacy: auto`: "none", Slurm's default (a
        simulated cluster has no users to hide from each other)."""
        return "none"

    def observe(self) -> ClusterSnapshot:
        self._admit_arrivals()
        jobs: list[ObservedJob] = []
        for c in self._unreported:
            jobs.append(
                ObservedJob(
                    c.job,
                    JobState.DONE,
                    restarts=c.restarts,
                    steps_done=c.job.total_steps,
                    finish_time=c.finish_time,
                )
            )
        self._unreported = []
        now = self.clock
        for job_id in sorted(self._active):
            sj = self._active[job_id]
            self._settle(sj, now)
            p = sj.placement
            rate = None
            if p is not None:
                state = JobState.RUNNING
                if (
                    p.partner is None
                    and p.consolidated
                    and now >= sj.progress_from + REPORT_AFTER_S
                ):
                    rate = self._reported(sj, p.gpu_type)
            else:
                state = JobState.HELD if sj.ran_before else JobState.PENDING
            jobs.append(
                ObservedJob(
                    sj.job,
                    state,
                    gpu_type=p.gpu_type if p else None,
                    nodes=p.nodes if p else (),
                    partner=p.partner if p else None,
                    restarts=sj.restarts,
                    steps_done=sj.steps_done,
                    measured_throughput=rate,
                )
            )
        return ClusterSnapshot(self.clock, self.nodes, tuple(jobs))

    def act(self, placement: RoundPlacement) -> ActResult:
        now = self.clock
        started: list[JobId] = []
        kept: list[JobId] = []
        moved: list[JobId] = []
        preempted: list[JobId] = []
        failed: list[tuple[JobId, str]] = []
        valid = validate(placement.jobs, self._active, self._usable, self._node_type, failed)
        for job_id in sorted(self._running):
            sj = self._running[job_id]
            new = valid.get(job_id)
            self._settle(sj, now)
            if new is not None and new.same_place(sj.placement):
                kept.append(job_id)
                continue
            if new is None:
                preempted.append(job_id)
            else:
                moved.append(job_id)
            sj.placement = None
        kept_set = set(kept)
        moved_set = set(moved)
        for job_id in sorted(valid):
            sj = self._active[job_id]
            if job_id in kept_set:
                continue
            if job_id not in moved_set:
                started.append(job_id)
            self._settle(sj, now)
            overhead = self.startup
            if sj.ran_before:
                sj.restarts += 1
                own = sj.job.restart_overhead
                overhead += (
                    self.overhead_by_type.get(sj.job.job_type, self.overhead)
                    if own is None
                    else own
                )
            sj.placement = valid[job_id]
            sj.ran_before = True
            if sj.job.scale_range is not None:  # moldable: the count it (re)starts at
                n = sj.placement.gpus
                self.counts_at_start[n] = self.counts_at_start.get(n, 0) + 1
            sj.progress_from = now + overhead
        self._running = {j: self._active[j] for j in sorted(valid)}
        for sj in self._running.values():
            # a kept job's finish time is recomputed too: the same arithmetic every
            # round keeps results identical to every earlier version
            self._set_rate(sj, now)
        return ActResult(tuple(started), tuple(kept), tuple(preempted), tuple(moved), tuple(failed))

    def _reported(self, sj: _SimJob, gpu: GpuType) -> float:
        """The job's rate as its current run reports it (noisy(), kept per run)."""
        if self.measurement_noise <= 0.0:
            return sj.rate
        got = sj.reported
        if got is None or got[0] != sj.restarts or got[1] != gpu:
            rate = noisy(sj.rate, self.measurement_noise, self.seed, sj.job.id, sj.restarts, gpu)
            got = sj.reported = (sj.restarts, gpu, rate)
        return got[2]

    # ---- the virtual clock -------------------------------------------------------------

    def advance(self, until: float) -> None:
        """Run the current placement until `until`, completing jobs at their exact time.

        Completions come in (finish time, job id) order. One scan of the running jobs
        collects those due by `until`; finishing a job can change its partner's rate
        and so its finish time, which re-enters the queue (its old entry goes stale).
        """
        due = [
            (sj.finish_at, j)
            for j, sj in self._running.items()
            if sj.finish_at <= until and sj.finish_at < math.inf
        ]
        heapq.heapify(due)
        while due:
            t, job_id = heapq.heappop(due)
            sj = self._running.get(job_id)
            if sj is None or sj.finish_at != t:
                continue  # stale: its partner finished first and its rate changed
            self._settle(sj, t)
            sj.steps_done = sj.job.total_steps
            partner = sj.placement.partner if sj.placement else None
            self._integrate(t)  # before removal: the job counts until it finishes
            del self._running[job_id]
            del self._active[job_id]
            sj.placement = None
            lifetime = t - sj.admitted_at
            mean_active = (
                (self._active_integral - sj.active_integral_at_admission) / lifetime
                if lifetime > 0
                else 1.0
            )
            c = Completion(sj.job, t, sj.restarts, max(1.0, mean_active))
            self._unreported.append(c)
            self.completions.append(c)
            if partner is not None and partner in self._running:
                # the partner has the GPUs to itself from now on
                other = self._running[partner]
                self._settle(other, t)
                assert other.placement is not None
                other.placement = JobPlacement(
                    partner,
                    other.placement.gpu_type,
                    other.placement.nodes,
                    None,
                    other.placement.consolidated,
                )
                self._set_rate(other, t)
                if other.finish_at <= until and other.finish_at < math.inf:
                    heapq.heappush(due, (other.finish_at, partner))
        for sj in self._running.values():
            self._settle(sj, until)
        self.clock = max(self.clock, until)

    def next_arrival_time(self) -> float | None:
        if self._next_arrival < len(self._arrivals):
            return self._arrivals[self._next_arrival].arrival_time
        return None

    def next_completion_time(self) -> float | None:
        t = min((sj.finish_at for sj in self._running.values()), default=math.inf)
        return t if t < math.inf else None

    def last_completion_of_running(self) -> float:
        """When the last running job would finish with the current placement."""
        return max((sj.finish_at for sj in self._running.values()), default=self.clock)

    def done(self) -> bool:
        return not self._active and self._next_arrival >= len(self._arrivals)

    def active_count(self) -> int:
        return len(self._active)

    def running(self) -> Mapping[JobId, JobPlacement]:
        return {j: sj.placement for j, sj in self._running.items() if sj.placement is not None}

    def progress_of(self, job_ids: Iterable[JobId]) -> dict[JobId, tuple[int, float]]:
        """(restarts, steps/s of its run, 0 while waiting) of each active job named:
        read-only, for `simulate --trace-job`."""
        out: dict[JobId, tuple[int, float]] = {}
        for j in job_ids:
            sj = self._active.get(j)
            if sj is not None:
                out[j] = (sj.restarts, sj.rate if sj.placement is not None else 0.0)
        return out

    # ---- internals -------------------------------------------------------------------

    def _admit_arrivals(self) -> None:
        while (
            self._next_arrival < len(self._arrivals)
            and self._arrivals[self._next_arrival].arrival_time <= self.clock
        ):
            job = self._arrivals[self._next_arrival]
            self._integrate(self.clock)
            self._active[job.id] = _SimJob(
                job,
                settled_at=self.clock,
                admitted_at=self.clock,
                active_integral_at_admission=self._active_integral,
            )
            self._next_arrival += 1

    def _integrate(self, t: float) -> None:
        if t > self._integral_t:
            self._active_integral += len(self._active) * (t - self._integral_t)
            self._integral_t = t

    def _set_rate(self, sj: _SimJob, now: float) -> None:
        p = sj.placement
        assert p is not None
        job = sj.job
        partner = self._running.get(p.partner) if p.partner is not None else None
        rate = self.rates.rate(job, p, None if partner is None else partner.job)
        sj.rate = rate
        start = max(now, sj.progress_from)
        left = max(0.0, job.total_steps - sj.steps_done)
        sj.finish_at = start + left / rate if rate > 0 else math.inf

    def _settle(self, sj: _SimJob, t: float) -> None:
        """Bring steps_done and the busy-GPU accounting up to time t."""
        if t <= sj.settled_at:
            return
        p = sj.placement
        if p is not None:
            settled = sj.settled_at
            from_t = settled if settled >= sj.progress_from else sj.progress_from
            rate = sj.rate
            if t > from_t and rate > 0:
                sj.steps_done = min(sj.job.total_steps, sj.steps_done + rate * (t - from_t))
            share = 0.5 if p.partner is not None else 1.0  # a pair holds one set of GPUs
            busy = self.busy_gpu_seconds
            busy[p.gpu_type] = busy.get(p.gpu_type, 0.0) + share * p.gpus * (t - settled)
            if settled < sj.progress_from:  # (part of) this span restores a checkpoint
                lost = min(t, sj.progress_from) - settled
                self.restart_gpu_seconds += share * p.gpus * lost
        sj.settled_at = t


__all__ = [
    "Completion",
    "SimulatedCluster",
]
