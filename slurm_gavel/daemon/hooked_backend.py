"""The backend as the daemon hands it to run_round: the real one plus the daemon's hooks.

observe() renames GPU types, merges job-reported progress, estimates steps done and
reconciles a resumed state with what Slurm reports; act() saves the inflight record
first, holds back while the daemon settles after a Slurm outage, in dry-run mode
only reports the plan, and reports the restarts the daemon measured with the act.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Protocol

from slurm_gavel.core.backend_hooks import BackendHooks
from slurm_gavel.core.cluster_rows import ClusterRows, rows_for
from slurm_gavel.core.priority_weights import apply_weights, capped_message
from slurm_gavel.core.round_config import SchedulerConfig
from slurm_gavel.core.round_report import RoundReport
from slurm_gavel.core.scheduler_state import SchedulerState
from slurm_gavel.daemon.config_types import Config
from slurm_gavel.daemon.dry_run import planned_actions
from slurm_gavel.daemon.gpu_names import to_slurm_names, to_table_names
from slurm_gavel.daemon.logs import event
from slurm_gavel.daemon.metrics import DaemonMetrics
from slurm_gavel.daemon.progress_learning import ProgressTracker, estimate_steps
from slurm_gavel.daemon.restart_clock import RestartClock
from slurm_gavel.daemon.run_watch import RunWatch
from slurm_gavel.domain.cluster_model import (
    SETTLING,
    ActResult,
    ClusterBackend,
    ClusterSnapshot,
    JobState,
    RoundPlacement,
)
from slurm_gavel.domain.model import JobId
from slurm_gavel.domain.throughputs import ThroughputError

log = logging.getLogger("slurm_gavel.daemon")

# How long after slurmctld answers again the daemon only observes. A job that ended
# while slurmctld was down is reported to it by slurmstepd's retry, which took more
# than 5 s after a restart in the integration test; 20 s covers that retry period.
SETTLE_AFTER_OUTAGE_S = 20.0


class TapHost(Protocol):
    """What the tap reads of the daemon (daemon.Daemon) and asks of it."""

    config: Config
    backend: ClusterBackend
    hooks: BackendHooks
    state: SchedulerState
    sched_config: SchedulerConfig
    progress: ProgressTracker | None
    run_watch: RunWatch
    restart_clock: RestartClock
    metrics: DaemonMetrics
    dry_run: bool
    clock: Callable[[], float]
    retried_unreachable: Callable[[], bool]

    def reconcile(self, snap: ClusterSnapshot) -> None: ...
    def reconcile_next_round(self) -> None: ...
    def refresh_table(self) -> None: ...
    def before_act(self, placement: RoundPlacement) -> None: ...


class DaemonTap:
    """The backend as the daemon hands it to run_round: the real one plus hooks.

    observe(): reconciles a resumed state with reality (see module doc) and keeps
    the snapshot for metrics and the status view. act(): saves the inflight
    record first; in dry-run mode it only reports the plan and touches nothing.
    The tap owns the settling after a Slurm outage (settle_until).
    """

    def __init__(self, daemon: TapHost) -> None:
        self.daemon = daemon
        # A Slurm outage was seen (the daemon's failed round, or a backend that waited
        # one out): the next observe starts the settling.
        self.outage = False
        # While clock() is before this, rounds observe but do not act.
        self.settle_until: float | None = None
        self.last_snapshot: ClusterSnapshot | None = None
        self._capped_logged: set[JobId] = set()
        self._given_back_logged: set[JobId] = set()  # dry run: they stay, log once
        self._rows: ClusterRows | None = None

    def observe(self) -> ClusterSnapshot:
        d = self.daemon
        snap = d.backend.observe()
        if d.retried_unreachable():
            self.outage = True  # the backend waited out slurmctld inside this observe
        ends = d.hooks.ended_runs()
        for e in ends:
            d.metrics.run_ends.labels(kind=e.kind.value).inc()
        if d.config.gpu_types:
            snap = to_table_names(snap, d.config.gpu_types)
        snap = self._admin_weights(snap)
        if d.progress is not None:
            snap = d.progress.merge(snap)
            d.refresh_table()
        # How runs ended, and the steps the jobs reported (not yet estimated ones)
        # (daemon/run_watch.py): jobs to give back leave the round here.
        runs = d.progress.current_runs if d.progress is not None else None
        snap = d.run_watch.observe(ends, snap, runs)
        # The rows the round uses (GPU types the table lacks included: cluster_rows.py);
        # the scheduler's own when it last ran with this table, else the tap's.
        rows = d.state.caches.cluster_rows
        if rows is None or rows.table is not d.sched_config.table:
            rows = self._rows
        rows = self._rows = rows_for(rows, d.sched_config.table, snap.capacity())
        snap = estimate_steps(
            snap,
            {j: a.received_s for j, a in d.state.jobs.items()},
            {j: a.restarts for j, a in d.state.jobs.items()},
            rows.as_table(),
            d.config.settings.preemption_overhead_seconds,
        )
        self.last_snapshot = snap
        if self.outage:
            self.outage = False
            self.settle_until = d.clock() + SETTLE_AFTER_OUTAGE_S
        d.reconcile(snap)
        return snap

    def settle_left(self) -> float | None:
        """Seconds until rounds act again after an outage; None when not settling."""
        if self.settle_until is None:
            return None
        return self.settle_until - self.daemon.clock()

    def _admin_weights(self, snap: ClusterSnapshot) -> ClusterSnapshot:
        """Priority weights from the admin (QOS), the user's own factor capped; a job
        over the cap is logged once while Slurm lists it."""
        weights = self.daemon.config.weights
        capped: set[JobId] = set()

        def on_capped(job: JobId, user_weight: float) -> None:
            capped.add(job)
            if job not in self._capped_logged:
                fields = capped_message(job, user_weight, weights)
                event(log, "weight_capped", logging.WARNING, **fields)

        snap = apply_weights(snap, weights, on_capped)
        self._capped_logged = capped
        return snap

    def give_back(self, report: RoundReport) -> None:
        """Waiting jobs the daemon can never schedule go back to Slurm with the reason
        (the backend's HeldJobGiveBack hook, core/backend_hooks.py), so no job stays
        held forever: those whose comment the grammar refuses (the backend's
        refused_held) and those whose job type or scale the throughput table lacks. A
        backend without the hook keeps them. A failure is logged; the round stands."""
        d = self.daemon
        giver = d.hooks.give_back
        if giver is None or self.last_snapshot is None:
            return
        reasons: dict[JobId, str] = dict(giver.refused_held)
        watched = d.run_watch.ready_reasons()  # crash loops, jobs that never checkpoint
        reasons.update(watched)
        waiting = {
            o.job.id: o.job
            for o in self.last_snapshot.jobs
            if o.state in (JobState.PENDING, JobState.HELD)
        }
        for job_id, skip in report.skipped:
            job = waiting.get(job_id)
            if job is None:
                continue
            try:
                d.sched_config.table.row(job.job_type, job.scale_factor)
            except ThroughputError:
                reasons[job_id] = skip.detail  # not in the table: no round will ever place it
        for job_id, why in sorted(reasons.items()):
            if job_id not in self._given_back_logged:
                event(log, "job_given_back", logging.WARNING, job=job_id, reason=why[:300],
                      dry_run=d.dry_run)  # fmt: skip
        self._given_back_logged = set(reasons)
        if not reasons or d.dry_run:
            return
        try:
            failed = giver.give_back(reasons)
        except Exception as e:  # Slurm away: the next round tries again
            event(log, "give_back_failed", logging.WARNING, error=str(e)[:300])
            return
        for job_id, why in sorted(failed.items()):
            event(log, "give_back_failed", logging.WARNING, job=job_id, error=why[:300])
        done = [j for j in watched if j not in failed]
        for label in d.run_watch.given_back(done):
            d.metrics.jobs_given_back.labels(why=label).inc()

    def act(self, placement: RoundPlacement) -> ActResult:
        """The act (``_act``), reported with the restarts the daemon's restart clock
        measured in this round (daemon/restart_clock.py): the round keeps them."""
        d = self.daemon
        result = self._act(placement)
        waits = d.hooks.checkpoint_waits()
        return d.restart_clock.on_act(
            result, placement.start, self.last_snapshot, waits, d.state.jobs
        )

    def _act(self, placement: RoundPlacement) -> ActResult:
        d = self.daemon
        d.before_act(placement)
        if d.dry_run:
            assert self.last_snapshot is not None
            return planned_actions(self.last_snapshot, placement)
        left = self.settle_left()
        if left is not None and left > 0:
            # slurmctld came back moments ago: it may still list as running jobs that
            # finished while it was down (slurmstepd re-sends a batch completion only
            # on a retry timer), and preempting one would requeue a finished job. Act
            # once the settle time has passed; meanwhile everything runs where it is.
            d.reconcile_next_round()
            event(log, "settling", round=placement.round_index, act_in_s=round(left, 1))
            return ActResult(failed=tuple((j, SETTLING) for j in placement.jobs))
        self.settle_until = None
        if d.config.gpu_types:
            placement = to_slurm_names(placement, d.config.gpu_types)
        result = d.backend.act(placement)
        if d.retried_unreachable():
            # slurmctld went away during the act: settle before the next one acts.
            self.settle_until = d.clock() + SETTLE_AFTER_OUTAGE_S
        return result
