"""What each restart of a job really costs, measured live.

A restart on Slurm is: the checkpoint signal until the job leaves its GPUs (the
backend times it: ``checkpoint_waits``), the requeue and the wait for Slurm to start
the released job, and the next run's start until it makes progress again (restoring
its checkpoint, warming up). The daemon sees the job's own progress reports (already
checked, daemon/progress_learning.py): once the restarted run reports a rate,

    restore = (now - released) - (steps now - steps when stopped) / rate

is the time since the daemon released it that did not go into steps (an upper bound
by the age of the report, at most the report interval). The cost of the restart is
checkpoint + restore, clamped to [0, cap]. The clock only measures: each
measurement goes to the round with the act's report, and the round keeps the job's
learned cost in its own slot of the scheduler state (core/restart_costs/restart_costs.py: the mean
of its last measurement and the one before, weight 1/2 each), what restart-aware
rounds (core/restart_aware/restart_aware.py) use instead of the configured
``preemption_overhead_seconds``.

The reports are the user's: a job could claim to restore slowly to be kept longer on
its GPUs. The cap bounds that: ``max(MIN_CAP_S, CAP_FACTOR x the admin default)``.
Nothing is measured for a job that reports no progress (its cost stays the default).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from slurm_gavel.core.scheduler_state import JobAccount
from slurm_gavel.domain.cluster_model import ActResult, ClusterSnapshot, JobState
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
    the learned costs are in the scheduler state).

    The clock measures and the round keeps: ``on_act`` runs as the backend's act
    returns (daemon/hooked_backend.py) and adds the restarts it measured to the act's
    report (``ActResult.restart_costs``), which the round's RestartCosts plugin folds
    into its slot (core/restart_costs/restart_costs.py). What the clock learned of the restarts in
    progress counts once the round has succeeded (``commit``); a round that fails
    leaves them as they were (``discard``), as it leaves the scheduler state."""

    def __init__(self, default_seconds: float) -> None:
        self.cap = max(MIN_CAP_S, CAP_FACTOR * default_seconds)
        self._pending: dict[JobId, _Pending] = {}
        self._staged: dict[JobId, _Pending] | None = None

    def on_act(
        self,
        result: ActResult,
        now: float,
        snap: ClusterSnapshot | None,
        waits: Mapping[JobId, float],
        accounts: Mapping[JobId, JobAccount],
    ) -> ActResult:
        """The act's report with the restarts measured in this round (job, seconds).
        ``now``: the round's clock; ``snap``: what the round observed; ``waits``: the
        seconds each job this act signalled took to leave; ``accounts``: the round's
        (read: a job's steps when it was stopped)."""
        pending = {j: replace(p) for j, p in self._pending.items()}
        self._staged = pending
        measured: list[tuple[JobId, float]] = []
        for job_id, seconds in waits.items():
            acct = accounts.get(job_id)
            if acct is not None:
                pending[job_id] = _Pending(max(0.0, seconds), acct.steps_done)
        for job_id in (*result.started, *result.moved):
            p = pending.get(job_id)
            if p is not None and p.released_at is None:
                p.released_at = now
        if snap is None:
            return result
        seen = set()
        for o in snap.jobs:
            job_id = o.job.id
            seen.add(job_id)
            p = pending.get(job_id)
            if p is not None and o.state is JobState.DONE:
                del pending[job_id]
                continue
            if p is None or p.released_at is None or o.state is not JobState.RUNNING:
                continue
            rate, steps = o.measured_throughput, o.steps_done
            if rate is None or rate <= 0 or steps is None or now <= p.released_at:
                continue
            working = max(0.0, steps - p.steps_at_stop) / rate
            restore = max(0.0, (now - p.released_at) - working)
            measured.append((job_id, min(self.cap, p.checkpoint_s + restore)))
            del pending[job_id]
        for gone in [j for j in pending if j not in seen]:
            del pending[gone]
        if not measured:
            return result
        return replace(result, restart_costs=(*result.restart_costs, *measured))

    def commit(self) -> None:
        """The round succeeded: the restarts in progress are as its act left them."""
        if self._staged is not None:
            self._pending, self._staged = self._staged, None

    def discard(self) -> None:
        """The round failed: the restarts in progress stay as they were before it."""
        self._staged = None
