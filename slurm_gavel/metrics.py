"""Prometheus metrics of the daemon.

Everything lives in a private CollectorRegistry (not prometheus-client's global
one), so tests and several daemons in one process never collide, and the
endpoint shows only slurm-gavel's series. Names follow Prometheus conventions:
``_seconds`` for durations, ``_total`` for counters.
"""

from __future__ import annotations

import time
from collections import Counter as Tally
from collections.abc import Mapping
from typing import TYPE_CHECKING

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    Info,
    disable_created_metrics,
    generate_latest,
    start_http_server,
)

from slurm_gavel import __version__

if TYPE_CHECKING:  # only for annotations: the metrics module stays import-light
    from slurm_gavel.backends.base import ClusterSnapshot
    from slurm_gavel.scheduler import RoundReport

# Rounds are seconds to minutes long; the solver a few ms to tens of seconds.
_ROUND_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120)
_SOLVER_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30)
_COMMAND_BUCKETS = (0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 1024)


class DaemonMetrics:
    def __init__(self) -> None:
        # No `<counter>_created` series: they double the series count and Slurm
        # dashboards do not use them (process-wide, but this process is the daemon).
        disable_created_metrics()
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        Info("slurm_gavel_build", "The running slurm-gavel's version (always 1)", registry=r).info(
            {"version": __version__}
        )
        self.rounds = Counter("gavel_rounds_total", "Scheduling rounds completed", registry=r)
        self.round_errors = Counter(
            "gavel_round_errors_total",
            "Rounds that failed, by cause (slurm_unavailable, solver, internal)",
            ["cause"],
            registry=r,
        )
        self.round_duration = Histogram(
            "gavel_round_duration_seconds",
            "Wall time of one round: observe + allocate + assign + act + persist",
            buckets=_ROUND_BUCKETS,
            registry=r,
        )
        self.solver_seconds = Histogram(
            "gavel_solver_seconds",
            "Time the allocation policy took (model build + solve)",
            buckets=_SOLVER_BUCKETS,
            registry=r,
        )
        self.jobs = Gauge(
            "gavel_jobs", "Managed jobs by state (pending, running, held)", ["state"], registry=r
        )
        self.gpus_in_use = Gauge(
            "gavel_gpus_in_use", "GPUs placed managed jobs this round", ["gpu_type"], registry=r
        )
        self.gpus_usable = Gauge(
            "gavel_gpus_usable",
            "GPUs managed jobs may use (up nodes, minus GPUs of unmanaged jobs)",
            ["gpu_type"],
            registry=r,
        )
        self.preemptions = Counter(
            "gavel_preemptions_total", "Jobs preempted (checkpoint signal sent)", registry=r
        )
        self.starts = Counter("gavel_job_starts_total", "Jobs started or restarted", registry=r)
        self.act_failures = Counter(
            "gavel_action_failures_total", "Per-job actions the backend could not do", registry=r
        )
        self.slurm_command_failures = Counter(
            "gavel_slurm_command_failures_total",
            "Slurm commands that failed (non-zero exit, timeout)",
            ["command"],
            registry=r,
        )
        self.slurm_commands_per_round = Histogram(
            "gavel_slurm_commands_per_round",
            "Slurm commands (sinfo, squeue, scontrol, scancel) issued in one round",
            buckets=_COMMAND_BUCKETS,
            registry=r,
        )
        self.last_round_timestamp = Gauge(
            "gavel_last_round_timestamp_seconds",
            "Unix time the last successful round ended (alert when it stops moving)",
            registry=r,
        )
        self.state_save_failures = Counter(
            "gavel_state_save_failures_total",
            "Saves of state.json that failed (a full disk, an I/O error); while the "
            "pre-round save fails the daemon does not act (docs/admin-guide.md, 11)",
            registry=r,
        )
        self.config_reloads = Counter(
            "gavel_config_reloads_total",
            "Config reloads asked with SIGHUP, by result (applied, refused: the daemon "
            "kept its running config; the log names the problem)",
            ["result"],
            registry=r,
        )
        self.state_save_failing = Gauge(
            "gavel_state_save_failing",
            "1 while the last save of state.json failed (the daemon then does not act), else 0",
            registry=r,
        )
        self.nodes = Gauge(
            "gavel_nodes",
            "Nodes of the managed partitions by state (up, not_responding, down, drained, "
            "failing, rebooting, powered_down)",
            ["state"],
            registry=r,
        )
        # Named as the common Slurm exporters name theirs, so existing GPU panels
        # take them with a prefix change; labels are bounded by the cluster's
        # partitions, GPU types and accounts (no per-job label).
        gpu_labels = ["gpu_type", "partition"]
        self.gpus_total = Gauge(
            "slurm_gavel_gpus_total", "GPUs of the managed partitions", gpu_labels, registry=r
        )
        self.gpus_alloc = Gauge(
            "slurm_gavel_gpus_alloc",
            "GPUs held by jobs (managed and unmanaged); a space-shared GPU counts once",
            gpu_labels,
            registry=r,
        )
        self.gpus_idle = Gauge(
            "slurm_gavel_gpus_idle", "GPUs on up nodes held by no job", gpu_labels, registry=r
        )
        self.account_jobs = Gauge(
            "slurm_gavel_account_jobs",
            "Managed jobs by Slurm account and state (pending, running)",
            ["account", "state"],
            registry=r,
        )
        self._seen_gpu_keys: set[tuple[str, str]] = set()
        self._seen_accounts: set[tuple[str, str]] = set()
        self._seen_states: set[str] = set()
        self._seen_node_states: set[str] = set()
        self._seen_types: set[str] = set()

    def record_round(
        self,
        report: RoundReport,
        snap: ClusterSnapshot | None,
        duration: float,
        commands: int | None,
    ) -> None:
        """Everything one completed round changes."""
        r = report.result
        self.rounds.inc()
        self.round_duration.observe(duration)
        if report.reallocated:
            self.solver_seconds.observe(report.solve_seconds)
        self.preemptions.inc(len(r.preempted) + len(r.moved))
        self.starts.inc(len(r.started) + len(r.moved))
        self.act_failures.inc(len(r.failed))
        if snap is not None:
            self.set_jobs(Tally(o.state.value for o in snap.jobs if o.state.value != "done"))
            failed = {j for j, _ in r.failed}
            in_use: dict[str, float] = {}
            for p in report.placement.jobs.values():
                if p.job_id not in failed:
                    in_use[p.gpu_type] = in_use.get(p.gpu_type, 0) + p.gpus
            self.set_gpus(in_use, snap.capacity())
            self.set_cluster(snap)
            by_state = Tally(n.state.value for n in snap.nodes)
            self._seen_node_states |= set(by_state)
            for st in self._seen_node_states:
                self.nodes.labels(state=st).set(by_state.get(st, 0))
        if commands is not None:
            self.slurm_commands_per_round.observe(commands)
        self.last_round_timestamp.set(time.time())

    def set_jobs(self, by_state: Mapping[str, int]) -> None:
        """Set the job gauges; states seen before and absent now drop to 0, not vanish."""
        self._seen_states |= set(by_state)
        for s in self._seen_states:
            self.jobs.labels(state=s).set(by_state.get(s, 0))

    def set_gpus(self, in_use: Mapping[str, float], usable: Mapping[str, float]) -> None:
        self._seen_types |= set(in_use) | set(usable)
        for t in self._seen_types:
            self.gpus_in_use.labels(gpu_type=t).set(in_use.get(t, 0))
            self.gpus_usable.labels(gpu_type=t).set(usable.get(t, 0))

    def set_cluster(self, snap: ClusterSnapshot) -> None:
        """GPU gauges by (GPU type, partition) and job gauges by account; label
        sets seen before and absent now drop to 0."""
        total, alloc, idle = gpu_counts(snap)
        self._seen_gpu_keys |= set(total)
        for key in self._seen_gpu_keys:
            self.gpus_total.labels(*key).set(total.get(key, 0))
            self.gpus_alloc.labels(*key).set(alloc.get(key, 0))
            self.gpus_idle.labels(*key).set(idle.get(key, 0))
        jobs = Tally(
            (o.job.account or "", o.state.value)
            for o in snap.jobs
            if o.state.value in ("pending", "running")
        )
        self._seen_accounts |= set(jobs)
        for acct, state in self._seen_accounts:
            self.account_jobs.labels(account=acct, state=state).set(jobs.get((acct, state), 0))

    def count_command_failures(self, failures: Mapping[str, int]) -> None:
        for command, n in failures.items():
            if n:
                self.slurm_command_failures.labels(command=command).inc(n)

    def serve(self, port: int, address: str = "127.0.0.1") -> None:
        """Expose /metrics over HTTP in a background thread (prometheus-client's server)."""
        start_http_server(port, addr=address, registry=self.registry)

    def exposition(self) -> str:
        """The text a scrape would return (for tests and `--once` debugging)."""
        return generate_latest(self.registry).decode()


GpuKey = tuple[str, str]  # (gpu_type, partition)


def gpu_counts(
    snap: ClusterSnapshot,
) -> tuple[dict[GpuKey, int], dict[GpuKey, int], dict[GpuKey, int]]:
    """Total, allocated and idle GPUs per (GPU type, partition) of one snapshot."""
    running = {o.job.id: o for o in snap.jobs if o.state.value == "running"}
    held: Tally[str] = Tally()
    for o in running.values():
        # A space-shared pair runs on the same GPUs: count them under one job only.
        if o.partner is not None and o.partner in running and str(o.partner) < str(o.job.id):
            continue
        for sl in o.nodes:
            held[sl.node] += sl.gpus
    total: dict[GpuKey, int] = {}
    alloc: dict[GpuKey, int] = {}
    idle: dict[GpuKey, int] = {}
    for n in snap.nodes:
        key = (str(n.gpu_type), n.partition)
        used = min(n.gpus, n.gpus_held_unmanaged + held[n.name])
        total[key] = total.get(key, 0) + n.gpus
        alloc[key] = alloc.get(key, 0) + used
        free = n.gpus - used if n.state.value == "up" else 0
        idle[key] = idle.get(key, 0) + free
    return total, alloc, idle
