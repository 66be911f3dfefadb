"""Which managed jobs' runs ended since the last observe, and what ended each: the
facts behind the daemon's watch on crash loops and on jobs that never checkpoint
(core/run_ends.py says the kinds, daemon/run_watch.py decides). Pure over the
records, plus what the backend itself did (signalled, requeue-held), so that it is
tested on records without a cluster.

A run ended when Slurm's restart count grew (a requeue: the job library's exit 99
under RequeueExitHold, the daemon's requeue-hold, a launch that failed and was
requeued held, a node failure) or when a job the daemon signalled is finished. Who
stopped it tells the kinds apart:

- the daemon requeue-held it at its grace end: IGNORED_SIGNAL;
- the daemon signalled it and it left: CHECKPOINTED, or, finished with the signal
  as its end (no handler), KILLED_BY_SIGNAL;
- its owner's requeuehold (user_holds.py): not reported (the owner's choice);
- nobody: UNSIGNALLED, with the longest the run was seen running (Slurm's start time
  against the observe), None when no observe saw it run: a crash at start ends
  before the next round.
"""

from __future__ import annotations

import signal as signals
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field

from slurm_gavel.backends.slurm.records import ACTIVE_STATES, SlurmJob
from slurm_gavel.core.run_ends import RunEnd, RunEndKind
from slurm_gavel.domain.model import JobId


def signal_number(name: str) -> int | None:
    """USR1 -> 10 (this host's numbering, the compute nodes' as well: Linux)."""
    try:
        return int(signals.Signals["SIG" + name.upper().removeprefix("SIG")])
    except KeyError:
        return None


@dataclass
class RunEnds:
    """The run ends of each observe (ended()); remembers how long each job's current
    run was seen running."""

    checkpoint_signal: str = "USR1"
    # job -> the longest its current run was seen running (seconds)
    ran_for: dict[JobId, float] = field(default_factory=dict)

    def ended(
        self,
        before: Mapping[JobId, SlurmJob],
        now: Mapping[JobId, SlurmJob],
        at: float,
        *,
        signalled: Collection[JobId],
        requeue_held: Collection[JobId],
        owners: Collection[JobId],
    ) -> list[RunEnd]:
        """The runs ended between the observe of `before` and this one (`now`, at time
        `at`): managed jobs by id. signalled: the jobs the daemon signalled and had not
        seen waiting again, as they were before this observe; requeue_held: those it
        requeue-held at their grace end since the last observe; owners: those whose
        owner requeue-held them (marked hold=user in this observe)."""
        signum = signal_number(self.checkpoint_signal)
        out: list[RunEnd] = []
        for job_id, sj in now.items():
            prev = before.get(job_id)
            ran = self.ran_for.get(job_id)
            if prev is not None:
                end = self._end(job_id, prev, sj, ran, signum, signalled, requeue_held, owners)
                if end is not None:
                    out.append(end)
                    self.ran_for.pop(job_id, None)
            if sj.state == "RUNNING" and sj.start_time > 0:
                self.ran_for[job_id] = max(self.ran_for.get(job_id, 0.0), at - sj.start_time)
        for gone in [j for j in self.ran_for if j not in now or now[j].state not in ACTIVE_STATES]:
            del self.ran_for[gone]
        return out

    def _end(
        self,
        job_id: JobId,
        prev: SlurmJob,
        sj: SlurmJob,
        ran: float | None,
        signum: int | None,
        signalled: Collection[JobId],
        requeue_held: Collection[JobId],
        owners: Collection[JobId],
    ) -> RunEnd | None:
        finished = sj.state not in ACTIVE_STATES
        if finished:
            if prev.state not in ACTIVE_STATES or job_id not in signalled:
                return None  # seen finished before, or it ended on its own: done
            if signum is not None and sj.exit_signal == signum:
                return RunEnd(
                    job_id,
                    RunEndKind.KILLED_BY_SIGNAL,
                    f"{sj.state} 0:{signum} after SIG{self.checkpoint_signal}",
                )
            return None  # it finished as it was told to stop: nothing lost
        if sj.restarts <= prev.restarts:
            return None
        if job_id in requeue_held:
            return RunEnd(job_id, RunEndKind.IGNORED_SIGNAL)
        if job_id in signalled:
            return RunEnd(job_id, RunEndKind.CHECKPOINTED)
        if job_id in owners:
            return None
        if sj.exit_signal is not None:
            how = f"signal {sj.exit_signal}"
        elif sj.exit_code is not None:
            how = f"exit code {sj.exit_code}"
        else:
            how = "exit code unknown"
        return RunEnd(job_id, RunEndKind.UNSIGNALLED, f"{sj.state}, {how}", ran_s=ran)
