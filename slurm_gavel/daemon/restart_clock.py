"""What each restart of a job really costs, measured live.

A restart on Slurm is: the checkpoint signal until the job leaves its GPUs (the
backend times it: ``checkpoint_waits``), the requeue and the wait for Slurm to start
the released job, and the next run's start until it makes progress again (restoring
its checkpoint, warming up). The daemon sees the job's own progress reports (already
checked, daemon/progress_learning.py): once the restarted run reports a rate,

    restore = (now - released) - (steps now - steps when stopped) / rate

is the time since the daemon released it that did not go into steps (an upper bound
by the age of the report, at most the report interval). The cost of the restart is
checkpoint + restore, clamped to [0, cap]; the job's ``JobAccount.restart_cost_s``
(kept in the state file) is the mean of its last measurement and the one before
(weight 1/2 each), what restart-aware rounds (core/restart_aware.py) use instead of
the configured ``preemption_overhead_seconds``.

The reports are the user's: a job could claim to restore slowly to be kept longer on
its GPUs. The cap bounds that: ``max(MIN_CAP_S, CAP_FACTOR x the admin default)``.
Nothing is measured for a job that reports no progress (its cost stays the default).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from slurm_gavel.core.round_report import RoundReport
from slurm_gavel.core.scheduler_state import SchedulerState
from slurm_gavel.domain.cluster_model import ClusterSnapshot, JobState
from slurm_gavel.domain.model import JobId

MIN_CAP_S = 600.0
CAP_FACTOR = 4.0


@dataclass
class _Pending:
    checkpoint_s: float
    steps_at_stop: float
    released_at: float | None = None


class RestartClock:
    """Per job, the restart in progress (transient: a daemon restart forgets them,
    the learned costs are in the scheduler state)."""

    def __init__(self, default_seconds: float) -> None:
        self.cap = max(MIN_CAP_S, CAP_FACTOR * default_seconds)
        self._pending: dict[JobId, _Pending] = {}
        self.measured: list[tuple[JobId, float]] = []  # this round's, for metrics/logs

    def on_round(
        self,
        state: SchedulerState,
        report: RoundReport,
        snap: ClusterSnapshot | None,
        waits: Mapping[JobId, float],
    ) -> list[tuple[JobId, float]]:
        """Account one round; returns the restarts measured in it (job, seconds)."""
        self.measured = []
        now = report.time
        for job_id, seconds in waits.items():
            acct = state.jobs.get(job_id)
            if acct is not None:
                self._pending[job_id] = _Pending(max(0.0, seconds), acct.steps_done)
        r = report.result
        for job_id in (*r.started, *r.moved):
            p = self._pending.get(job_id)
            if p is not None and p.released_at is None:
                p.released_at = now
        if snap is None:
            return self.measured
        seen = set()
        for o in snap.jobs:
            job_id = o.job.id
            seen.add(job_id)
            p = self._pending.get(job_id)
            if p is not None and o.state is JobState.DONE:
                del self._pending[job_id]
                continue
            if p is None or p.released_at is None or o.state is not JobState.RUNNING:
                continue
            rate, steps = o.measured_throughput, o.steps_done
            if rate is None or rate <= 0 or steps is None or now <= p.released_at:
                continue
            working = max(0.0, steps - p.steps_at_stop) / rate
            restore = max(0.0, (now - p.released_at) - working)
            cost = min(self.cap, p.checkpoint_s + restore)
            acct = state.jobs.get(job_id)
            if acct is not None:
                before = acct.restart_cost_s
                acct.restart_cost_s = cost if before is None else (before + cost) / 2.0
            self.measured.append((job_id, cost))
            del self._pending[job_id]
        for gone in [j for j in self._pending if j not in seen]:
            del self._pending[gone]
        return self.measured
