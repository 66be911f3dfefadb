"""Prometheus metrics of the daemon.

Everything lives in a private CollectorRegistry (not prometheus-client's global
one), so tests and several daemons in one process never collide, and the
endpoint shows only slurm-gavel's series. Names follow Prometheus conventions:
``_seconds`` for durations, ``_total`` for counters, all under one prefix,
``slurm_gavel_``. docs/admin-guide.md section 10 has the table of them (a test holds
it, and conf/grafana/slurm-gavel.json, to what this registry exports). What a round's
snapshot says per GPU type, partition and account is computed in metrics_values.py;
this module declares the series and sets them.
"""

from __future__ import annotations

import time
from collections import Counter as Tally
from collections.abc import Mapping, Sequence
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
from slurm_gavel.daemon.metrics_values import account_received, account_shares, gpu_counts

if TYPE_CHECKING:  # only for annotations: the metrics module stays import-light
    from slurm_gavel.core.round_report import RoundReport
    from slurm_gavel.domain.cluster_model import ClusterSnapshot
    from slurm_gavel.domain.model import Allocation, JobId

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
        self.rounds = Counter("slurm_gavel_rounds_total", "Scheduling rounds completed", registry=r)
        self.round_errors = Counter(
            "slurm_gavel_round_errors_total",
            "Rounds that failed, by cause (slurm_unavailable, solver, input, state_save, io, "
            "internal)",
            ["cause"],
            registry=r,
        )
        self.round_duration = Histogram(
            "slurm_gavel_round_duration_seconds",
            "Wall time of one round: observe + allocate + assign + act + persist",
            buckets=_ROUND_BUCKETS,
            registry=r,
        )
        self.solver_seconds = Histogram(
            "slurm_gavel_solver_seconds",
            "Time the allocation policy took (model build + solve)",
            buckets=_SOLVER_BUCKETS,
            registry=r,
        )
        self.jobs = Gauge(
            "slurm_gavel_jobs",
            "Managed jobs by state (pending, running, held)",
            ["state"],
            registry=r,
        )
        self.gpus_in_use = Gauge(
            "slurm_gavel_gpus_in_use",
            "GPUs placed managed jobs this round",
            ["gpu_type"],
            registry=r,
        )
        self.gpus_usable = Gauge(
            "slurm_gavel_gpus_usable",
            "GPUs managed jobs may use (up nodes, minus GPUs of unmanaged jobs)",
            ["gpu_type"],
            registry=r,
        )
        self.preemptions = Counter(
            "slurm_gavel_preemptions_total", "Jobs preempted (checkpoint signal sent)", registry=r
        )
        self.starts = Counter(
            "slurm_gavel_job_starts_total", "Jobs started or restarted", registry=r
        )
        self.run_ends = Counter(
            "slurm_gavel_run_ends_total",
            "Managed jobs' runs ended, by what ended them: checkpointed (at the checkpoint "
            "signal), ignored_signal (requeue-held at its grace end), killed_by_signal, "
            "unsignalled (requeued without the signal: a crash, or its own checkpoint)",
            ["kind"],
            registry=r,
        )
        self.jobs_given_back = Counter(
            "slurm_gavel_jobs_given_back_total",
            "Managed jobs given back to Slurm for how their runs ended: crash_loop, "
            "ignored_signal (it never checkpoints)",
            ["why"],
            registry=r,
        )
        self.restart_seconds = Counter(
            "slurm_gavel_restart_seconds_total",
            "Measured cost of the restarts of managed jobs: checkpoint signal to exit, "
            "requeue, and the next run's start until its first progress (restart_clock.py)",
            registry=r,
        )
        self.restart_gpu_seconds = Counter(
            "slurm_gavel_restart_gpu_seconds_total",
            "GPU time lost to the measured restarts (each restart's cost x the job's GPUs)",
            registry=r,
        )
        self.restarts_per_job = Gauge(
            "slurm_gavel_restarts_per_job",
            "Mean restarts of the managed jobs in the system (running, held or pending)",
            registry=r,
        )
        self.act_failures = Counter(
            "slurm_gavel_action_failures_total",
            "Per-job actions the backend could not do",
            registry=r,
        )
        self.slurm_command_failures = Counter(
            "slurm_gavel_slurm_command_failures_total",
            "Slurm commands that failed (non-zero exit, timeout)",
            ["command"],
            registry=r,
        )
        self.slurm_commands_per_round = Histogram(
            "slurm_gavel_slurm_commands_per_round",
            "Slurm commands (sinfo, squeue, scontrol, scancel) issued in one round",
            buckets=_COMMAND_BUCKETS,
            registry=r,
        )
        # Which path the policy's LPs took in rounds that reallocated (the Allocation's
        # decomposed and fallbacks, policies/solvers/solve_paths.py): a fallback is
        # exact too, only slower, so it is counted, not an error.
        self.solver_decompositions = Counter(
            "slurm_gavel_solver_decompositions_total",
            "LPs solved by decomposition with their optimality certificate met, by LP",
            ["lp"],
            registry=r,
        )
        self.solver_fallbacks = Counter(
            "slurm_gavel_solver_fallbacks_total",
            "LPs the decomposition handed to the plain LP, by LP and reason (the log has "
            "each one's message)",
            ["lp", "reason"],
            registry=r,
        )
        self.last_round_timestamp = Gauge(
            "slurm_gavel_last_round_timestamp_seconds",
            "Unix time the last successful round ended (alert when it stops moving)",
            registry=r,
        )
        self.state_save_failures = Counter(
            "slurm_gavel_state_save_failures_total",
            "Saves of state.json that failed (a full disk, an I/O error); while the "
            "pre-round save fails the daemon does not act (docs/admin-guide.md, 11)",
            registry=r,
        )
        self.config_reloads = Counter(
            "slurm_gavel_config_reloads_total",
            "Config reloads asked with SIGHUP, by result (applied, refused: the daemon "
            "kept its running config; the log names the problem)",
            ["result"],
            registry=r,
        )
        self.state_save_failing = Gauge(
            "slurm_gavel_state_save_failing",
            "1 while the last save of state.json failed (the daemon then does not act), else 0",
            registry=r,
        )
        self.nodes = Gauge(
            "slurm_gavel_nodes",
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
            "Managed jobs by Slurm account and state (pending, running, held)",
            ["account", "state"],
            registry=r,
        )
        # Fairness per account: what the policy gives (share) against what the jobs
        # held (alloc, the exporters' word for GPUs held). Share has no partition:
        # the policy allocates per GPU type, whichever partition holds the GPUs.
        self.account_gpus_share = Gauge(
            "slurm_gavel_account_gpus_share",
            "Allocated share: GPUs the policy's allocation gives the account's jobs "
            "(sum of allocation fraction x GPUs per job; a space-shared pair's half each)",
            ["account", "gpu_type"],
            registry=r,
        )
        self.account_gpus_alloc = Gauge(
            "slurm_gavel_account_gpus_alloc",
            "Received share: GPUs the account's managed jobs held this round (a "
            "space-shared GPU half to each job)",
            ["account", "gpu_type", "partition"],
            registry=r,
        )
        self.account_restarts = Counter(
            "slurm_gavel_account_restarts_total",
            "Preemptions and moves enacted on the account's jobs (each a Slurm requeue)",
            ["account"],
            registry=r,
        )
        self.account_checkpoint_waits = Counter(
            "slurm_gavel_account_checkpoint_waits_total",
            "The account's jobs sent the checkpoint signal and seen gone (or requeue-held)",
            ["account"],
            registry=r,
        )
        self.account_checkpoint_wait_seconds = Counter(
            "slurm_gavel_account_checkpoint_wait_seconds_total",
            "Seconds from the checkpoint signal until the account's jobs left their GPUs "
            "(exited, or requeue-held at the end of their grace); where the act did not "
            "wait for them, until the next round's observe saw them gone (an upper bound)",
            ["account"],
            registry=r,
        )
        self._seen_gpu_keys: set[tuple[str, str]] = set()
        self._seen_accounts: set[tuple[str, str]] = set()
        self._seen_shares: set[tuple[str, str]] = set()
        self._seen_received: set[tuple[str, str, str]] = set()
        self._seen_states: set[str] = set()
        self._seen_node_states: set[str] = set()
        self._seen_types: set[str] = set()

    def record_round(
        self,
        report: RoundReport,
        snap: ClusterSnapshot | None,
        duration: float,
        commands: int | None,
        allocation: Allocation | None = None,
        checkpoint_waits: Mapping[JobId, float] | None = None,
    ) -> None:
        """Everything one completed round changes. `allocation` is the policy's in
        force; `checkpoint_waits` the seconds each signalled job took to leave, as the
        round's act learnt them (from the backend; none where it does not tell)."""
        r = report.result
        self.rounds.inc()
        self.round_duration.observe(duration)
        if report.reallocated:
            self.solver_seconds.observe(report.solve_seconds)
            if allocation is not None:
                self.count_solver_paths(allocation)
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
            self.set_accounts(report, snap, allocation, checkpoint_waits or {})
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
            if o.state.value in ("pending", "running", "held")
        )
        self._seen_accounts |= set(jobs)
        for acct, state in self._seen_accounts:
            self.account_jobs.labels(account=acct, state=state).set(jobs.get((acct, state), 0))

    def set_accounts(
        self,
        report: RoundReport,
        snap: ClusterSnapshot,
        allocation: Allocation | None,
        waits: Mapping[JobId, float],
    ) -> None:
        """Per-account fairness gauges and restart/checkpoint counters of one round."""
        accounts = {o.job.id: o.job.account or "" for o in snap.jobs}
        share = account_shares(allocation, snap)
        self._seen_shares |= set(share)
        for key in self._seen_shares:
            self.account_gpus_share.labels(*key).set(share.get(key, 0))
        got = account_received(report, snap)
        self._seen_received |= set(got)
        for rkey in self._seen_received:
            self.account_gpus_alloc.labels(*rkey).set(got.get(rkey, 0))
        r = report.result
        for j in (*r.preempted, *r.moved):
            self.account_restarts.labels(account=accounts.get(j, "")).inc()
        for j, seconds in waits.items():
            acct = accounts.get(j, "")
            self.account_checkpoint_waits.labels(account=acct).inc()
            self.account_checkpoint_wait_seconds.labels(account=acct).inc(max(0.0, seconds))

    def record_restart_costs(
        self, measured: Sequence[tuple[JobId, float]], snap: ClusterSnapshot | None
    ) -> None:
        """The restarts measured this round (daemon/restart_clock.py), and the mean
        restart count of the jobs in the system."""
        gpus = {o.job.id: sum(s.gpus for s in o.nodes) for o in snap.jobs} if snap else {}
        for job_id, seconds in measured:
            self.restart_seconds.inc(seconds)
            self.restart_gpu_seconds.inc(seconds * gpus.get(job_id, 0))
        if snap is not None:
            active = [o for o in snap.jobs if o.state.value != "done"]
            mean = sum(o.restarts for o in active) / len(active) if active else 0.0
            self.restarts_per_job.set(mean)

    def count_solver_paths(self, allocation: Allocation) -> None:
        """The paths of one fresh allocation's LPs (call once per solve)."""
        for lp in allocation.decomposed:
            self.solver_decompositions.labels(lp=lp).inc()
        for f in allocation.fallbacks:
            self.solver_fallbacks.labels(lp=f.lp, reason=f.reason).inc()

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
