"""What a site's GPU jobs got, from sacct (`slurm-gavel report`). Pure.

Per job (all its runs: with ``sacct -D`` a requeued job has one record per run):

* JCT: its last run's end minus its first submission (finished jobs only);
* queueing delay: its first start minus its first submission;
* restarts: its runs minus one (each Gavel preemption is a requeue), or the
  daemon's own count when its state file knows the job and counted more;
* GPU-hours lost to restarts: restarts x the job's restart cost x its GPUs, the cost
  being the daemon's measurement for the job when its view has one, else the one
  given (`report --restart-seconds`, or the config's preemption_overhead_seconds);
  unknown (None) without either;
* GPU-hours per GPU type: sum over runs of elapsed x GPUs, by the run's type;
* finish-time fairness rho (Themis/Gavel, as simulate/collector.py): JCT over the
  time the job would have needed alone on an equal 1/n share of the cluster, n
  being the mean number of GPU jobs in the system over its lifetime, its work
  being what sacct_trace counts. Needs its job type in the throughput table and
  the cluster's GPUs per type.

Rows group the jobs by user, account or job type (plain jobs are "(plain)").
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from slurm_gavel.accounting.sacct import SacctRun, by_job
from slurm_gavel.domain.comment_grammar import ManagedCommentError, parse_comment
from slurm_gavel.domain.throughputs import ThroughputTable
from slurm_gavel.simulate.collector import MetricsCollector

FINAL = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY",
         "PREEMPTED", "BOOT_FAIL", "DEADLINE"}  # fmt: skip
GROUPS = ("user", "account", "type")
PLAIN = "(plain)"
REFUSED = "(refused comment)"


@dataclass
class JobFacts:
    job_id: str
    user: str
    account: str
    job_type: str  # from the gavel: comment; PLAIN or REFUSED otherwise
    state: str
    submit: float
    end: float | None  # None: not finished
    first_start: float | None
    restarts: int
    gpu_seconds: dict[str, float] = field(default_factory=dict)
    steps: float | None = None  # work done, when its type and GPUs are in the table
    scale: int = 0
    rho: float | None = None
    gpus: int = 0  # the most GPUs any of its runs had
    restart_cost: float | None = None  # seconds per restart, when known

    @property
    def restart_gpu_hours(self) -> float | None:
        if self.restart_cost is None:
            return None
        return self.restarts * self.restart_cost * self.gpus / 3600.0

    @property
    def jct(self) -> float | None:
        return None if self.end is None else self.end - self.submit

    @property
    def queue_delay(self) -> float | None:
        return None if self.first_start is None else self.first_start - self.submit

    def group(self, by: str) -> str:
        return {"user": self.user, "account": self.account, "type": self.job_type}[by]


def _type(comment: str) -> str:
    try:
        spec = parse_comment(comment, max_weight=None)
    except ManagedCommentError:
        return REFUSED
    return PLAIN if spec is None else spec.job_type


def job_facts(
    runs: Iterable[SacctRun],
    table: ThroughputTable,
    daemon_restarts: Mapping[str, int] | None = None,
    restart_costs: Mapping[str, float] | None = None,
    default_restart_seconds: float | None = None,
) -> list[JobFacts]:
    """One JobFacts per job that had GPUs in some run (the rest is not ours to judge)."""
    facts = []
    for job_id, job_runs in by_job(runs).items():
        if not any(r.gpu_total for r in job_runs):
            continue
        submits = [r.submit for r in job_runs if r.submit is not None]
        if not submits:
            continue
        last = job_runs[-1]
        ran = [r for r in job_runs if r.start is not None]
        gpu_seconds: dict[str, float] = {}
        for r in ran:
            for gpu, n in (r.gpus or {"(untyped)": r.gpu_total}).items():
                gpu_seconds[gpu] = gpu_seconds.get(gpu, 0.0) + r.elapsed * n
        f = JobFacts(
            job_id=job_id,
            user=last.user,
            account=last.account,
            job_type=_type(job_runs[0].comment),
            state=last.state,
            submit=min(submits),
            end=last.end if last.state in FINAL else None,
            first_start=ran[0].start if ran else None,
            restarts=max(len(job_runs) - 1, (daemon_restarts or {}).get(job_id, 0)),
            gpu_seconds=gpu_seconds,
            gpus=max(r.gpu_total for r in job_runs),
            restart_cost=(restart_costs or {}).get(job_id, default_restart_seconds),
        )
        f.scale, f.steps = _work(f.job_type, ran, table)
        facts.append(f)
    return facts


def _work(
    job_type: str, ran: Sequence[SacctRun], table: ThroughputTable
) -> tuple[int, float | None]:
    counts = {r.gpu_total for r in ran}
    if len(counts) != 1:
        return 0, None
    scale = counts.pop()
    if not table.has(job_type, scale) or any(r.gpu_type is None for r in ran):
        return scale, None
    row = table.row(job_type, scale)
    if any(row.get(r.gpu_type or "", 0.0) <= 0 for r in ran):
        return scale, None
    return scale, sum(r.elapsed * row[r.gpu_type or ""] for r in ran)


def add_fairness(
    facts: list[JobFacts], table: ThroughputTable, capacity: Mapping[str, int]
) -> None:
    """rho for every finished job whose work is known (see the module docstring)."""
    if not capacity:
        return
    metrics = MetricsCollector(table=table, capacity=dict(capacity))
    now = max((f.end or f.submit for f in facts), default=0.0)
    spans = [(f.submit, f.end if f.end is not None else now) for f in facts]
    for f in facts:
        if f.end is None or f.steps is None or f.jct is None or f.jct <= 0:
            continue
        iso = metrics.isolated_time(f.job_type, f.scale, f.steps, _mean_active(spans, f))
        f.rho = f.jct / iso if iso > 0 else None


def _mean_active(spans: Sequence[tuple[float, float]], f: JobFacts) -> float:
    """Mean number of jobs in the system (arrived, not finished) over f's lifetime."""
    a, b = f.submit, f.end or f.submit
    if b <= a:
        return 1.0
    overlap = sum(max(0.0, min(b, e) - max(a, s)) for s, e in spans)
    return max(1.0, overlap / (b - a))


def _stats(values: list[float]) -> dict[str, float | None]:
    if not values:
        return {"mean": None, "p50": None, "max": None}
    return {
        "mean": round(statistics.fmean(values), 3),
        "p50": round(statistics.median(values), 3),
        "max": round(max(values), 3),
    }


def summarise(facts: Sequence[JobFacts], by: str | None) -> list[dict[str, Any]]:
    """One row per group (all jobs as one group 'all' when by is None), sorted."""
    groups: dict[str, list[JobFacts]] = {}
    for f in facts:
        groups.setdefault(f.group(by) if by else "all", []).append(f)
    rows = []
    for name in sorted(groups):
        members = groups[name]
        gpu_hours: dict[str, float] = {}
        for f in members:
            for gpu, sec in f.gpu_seconds.items():
                gpu_hours[gpu] = gpu_hours.get(gpu, 0.0) + sec / 3600
        rows.append(
            {
                "group": name,
                "jobs": len(members),
                "finished": sum(f.end is not None for f in members),
                "jct_s": _stats([f.jct for f in members if f.jct is not None]),
                "queue_delay_s": _stats(
                    [f.queue_delay for f in members if f.queue_delay is not None]
                ),
                "restarts": sum(f.restarts for f in members),
                "restarts_per_job": round(sum(f.restarts for f in members) / len(members), 3),
                "restart_gpu_hours": _lost(members),
                "gpu_hours": {g: round(h, 4) for g, h in sorted(gpu_hours.items())},
                "rho": _stats([f.rho for f in members if f.rho is not None]),
            }
        )
    return rows


def _lost(members: Sequence[JobFacts]) -> float | None:
    """GPU-hours lost to the members' restarts; None when a job that restarted has no
    known restart cost (the sum would leave it out)."""
    total = 0.0
    for f in members:
        if f.restarts:
            lost = f.restart_gpu_hours
            if lost is None:
                return None
            total += lost
    return round(total, 4)


def job_json(f: JobFacts) -> dict[str, Any]:
    return {
        "job_id": f.job_id,
        "user": f.user,
        "account": f.account,
        "job_type": f.job_type,
        "state": f.state,
        "jct_s": f.jct,
        "queue_delay_s": f.queue_delay,
        "restarts": f.restarts,
        "restart_gpu_hours": None if f.restart_gpu_hours is None else round(f.restart_gpu_hours, 6),
        "gpu_hours": {g: round(s / 3600, 6) for g, s in sorted(f.gpu_seconds.items())},
        "rho": None if f.rho is None else round(f.rho, 4),
    }
