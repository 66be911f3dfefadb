"""Preemption: the checkpoint signal, the grace and the requeue-hold of preempted jobs.

A component of SlurmBackend that owns its state (which jobs were signalled, when,
their grace deadlines, how long each took to leave) and reaches Slurm only through
the transport's primitives (send_signal, states, requeuehold, read_nodes). Every
method that looks at a job is handed the round's SlurmView.

Each signalled job has its own grace deadline (signalled). An act waits for a
signalled job only when a start of the same act needs it gone (a move, a pair's GPU:
_wait_and_requeuehold); the others are left to exit on their own, and those still
running when their grace ends are requeue-held then, between rounds (enforce_grace,
called by the daemon's loop at grace_due_in), or else by the next act
(requeuehold_overdue). Either way a job is requeue-held only when its signal surely
reached it (_signal_reached).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping

from slurm_gavel.backends.slurm.grace import job_grace
from slurm_gavel.backends.slurm.old_runs import UNREACHABLE
from slurm_gavel.backends.slurm.records import RUNNING_STATES, SlurmJob, SlurmNode
from slurm_gavel.backends.slurm.shard_pairs import AfterExit, StartOrder
from slurm_gavel.backends.slurm.transport import SlurmTransport
from slurm_gavel.backends.slurm.view import SlurmView
from slurm_gavel.domain.cluster_model import JobState
from slurm_gavel.domain.model import JobId

log = logging.getLogger(__name__)

# Why a job an act waited for is neither requeue-held nor moved: the daemon is stopping.
STOPPING = (
    "the daemon is stopping: its wait for this preempted job ended early; the job keeps "
    "running and is requeue-held after its grace by the next daemon's act"
)

# A run younger than this (seconds) is not signalled yet: what the daemon gives
# SlurmBackend's fresh_run_s (at most half its round: commands/run.py). Slurm's start
# time is in whole seconds, so it spares a run's first FRESH_RUN_S - 1 s at least.
FRESH_RUN_S = 5.0


class Preemption:
    """Signal, grace and requeue-hold: the state and steps SlurmBackend.act uses."""

    def __init__(
        self,
        transport: SlurmTransport,
        *,
        grace_s: float,
        max_grace_s: float | None,
        checkpoint_signal: str,
        fresh_run_s: float,
        poll_s: float,
        clock: Callable[[], float],
    ) -> None:
        self.transport = transport
        self.grace_s = grace_s
        self.max_grace_s = max_grace_s
        self.checkpoint_signal = checkpoint_signal
        self.fresh_run_s = fresh_run_s  # a run younger than this is not signalled
        self.poll_s = poll_s
        self.clock = clock
        self.signalled: dict[JobId, float] = {}  # job -> grace deadline (clock)
        self.signal_sent: dict[JobId, float] = {}  # job -> when signalled (clock)
        # the last act's signalled jobs -> seconds until they left (metrics)
        self.checkpoint_waits: dict[JobId, float] = {}
        self.requeued_at: dict[JobId, float] = {}  # seen leaving its run in an act (clock)
        # Every job signalled, until an observe sees it waiting: a run that ends held
        # without being here was stopped by its owner (user_holds.py).
        self.stopped_runs: set[JobId] = set()
        # Jobs requeue-held at their grace end since the last observe (slurm/ended_runs.py:
        # they ignored the signal).
        self.requeue_held: set[JobId] = set()
        self._grace_capped_told: set[JobId] = set()  # logged once per job
        self._grace_checked: set[JobId] = set()  # signalled jobs enforce_grace looked at
        # signals another daemon sent, restored at a takeover (SlurmBackend.restore_signals)
        self.restored: set[JobId] = set()
        # Set when the daemon stops (SlurmBackend.stop_waiting): the act's waits end now.
        self.stopping = threading.Event()

    def forget_reruns(self, managed: Mapping[JobId, SlurmJob]) -> None:
        """Forget the signals of jobs that run again since: a run that began after the
        signal never got it (a signalled run is older than fresh_run_s, so its start is
        a second or more before the signal). Such an entry comes from another daemon
        (signals restored at a takeover, saved before the job was seen to leave); it
        would otherwise requeue-hold the new run at the old signal's grace end."""
        # Only restored entries: this daemon's own signal may go out within the second
        # its run started (Slurm's start time has whole seconds), which the test below
        # would read as a run begun after it, and signal the run again.
        for j in list(self.restored):
            sent = self.signal_sent.get(j)
            if sent is None:
                self.restored.discard(j)
                continue
            sj = managed.get(j)
            if sj is not None and sj.state in RUNNING_STATES and sj.start_time > sent - 1.0:
                del self.signal_sent[j]
                self.signalled.pop(j, None)
                self.stopped_runs.discard(j)
                self.restored.discard(j)

    def observed(self, now: float) -> None:
        """A new observe: forget the requeue seconds that no release can still meet."""
        self.requeued_at = {j: t for j, t in self.requeued_at.items() if now - t < 5}

    # --- steps ----------------------------------------------------------------------

    def half_freed(self, after: list[AfterExit], failed: dict[JobId, str]) -> list[StartOrder]:
        """The pair members whose GPU's stopping job has now left it (the act waited for
        it): started now rather than a round later. A pair whose stopping job still runs
        (its requeue failed, or it is still completing) waits, both of it."""
        if not after:
            return []
        holders = sorted({a.holder for a in after})
        states = self.transport.states(holders)
        stuck = {h for h in holders if h in failed or states.get(h) in RUNNING_STATES}
        waiting = {a.order.job_id for a in after if a.holder in stuck}
        waiting |= {a.partner for a in after if a.order.job_id in waiting and a.partner}
        for a in after:
            if a.order.job_id in waiting:
                failed.setdefault(a.order.job_id, a.why)
        return [a.order for a in after if a.order.job_id not in waiting]

    def signal(
        self, view: SlurmView | None, ids: list[JobId], failed: dict[JobId, str]
    ) -> list[JobId]:
        if not ids:
            return []
        bad = self.transport.send_signal(ids, self.checkpoint_signal, failed)
        now = self.clock()
        ok = [j for j in ids if j not in bad]
        for j in ok:
            self.signalled[j] = now + self.grace_of(view, j)
            self.signal_sent[j] = now
            self.stopped_runs.add(j)
            self._grace_checked.discard(j)
            self.restored.discard(j)  # this daemon's own signal now
        return ok

    def grace_of(self, view: SlurmView | None, j: JobId) -> float:
        sj = _managed_job(view, j)
        if sj is None:
            return self.grace_s
        g = job_grace(sj.reading, default_s=self.grace_s, cap_s=self.max_grace_s)
        if g.capped and j not in self._grace_capped_told:
            self._grace_capped_told.add(j)
            log.warning(
                "job %s asks grace=%s; given %gs, the admin's checkpoint.max_grace_seconds",
                j, g.asked, g.seconds,
            )  # fmt: skip
        return g.seconds

    def wait_out_requeue_second(self, view: SlurmView | None, ids: list[JobId]) -> None:
        """Release no job within the wall-clock second in which it was requeued.

        slurmd revokes the credential of a requeued job's last run, and refuses a new
        launch of that job whose credential carries the same second ("Killing
        non-startable batch job: Job credential revoked"): the job then ends FAILED,
        not requeued. Slurm itself keeps a requeued job back (BeginTime = requeue +
        121 s); our StartTime=now bypasses that, so wait out the second instead. The
        requeue second is Slurm's SubmitTime (reset on requeue), or when this act saw
        the job leave its run. At most about a second, and only for such jobs."""
        latest = 0.0
        for j in ids:
            sj = _managed_job(view, j)
            if sj is not None and sj.restarts > 0:
                latest = max(latest, float(sj.submit_time))
            latest = max(latest, float(int(self.requeued_at.pop(j, 0.0))))
        wait = latest + 1.05 - self.clock()
        if latest and wait > 0:
            time.sleep(min(wait, 1.1))

    def wait_and_requeuehold(
        self, view: SlurmView | None, ids: list[JobId], failed: dict[JobId, str]
    ) -> None:
        """Wait for signalled jobs to exit, each up to its own grace deadline: a job
        still running at its deadline is requeue-held then, not when the longest grace
        of the round ends, and the wait stops once no job is inside its grace."""
        start = self.clock()
        deadline = {j: self.signalled.get(j, start + self.grace_of(view, j)) for j in ids}
        sent = {j: self.signal_sent.get(j, start) for j in ids}
        running = list(ids)
        leaving: list[JobId] = []  # requeue-held (or exiting) jobs to let settle
        while running:
            if self.stopping.is_set():  # still in their grace: left signalled
                for j in running:
                    failed.setdefault(j, STOPPING)
                break
            states = self.transport.states(running)
            now = self.clock()
            for j in running:
                if states.get(j) not in RUNNING_STATES:
                    self.checkpoint_waits[j] = now - sent[j]
            running = [j for j in running if states.get(j) in RUNNING_STATES]
            due = [j for j in running if deadline[j] <= now]
            if due:
                self.checkpoint_waits.update((j, now - sent[j]) for j in due)
                leaving += self._requeuehold_due(view, due, failed)
                running = [j for j in running if j not in due]
            if running:
                soonest = min(deadline[j] for j in running)
                self.stopping.wait(max(0.0, min(self.poll_s, soonest - now)))
        # Wait (briefly) until requeued jobs have left COMPLETING, so a move can place them.
        settle = self.clock() + 15
        while leaving and self.clock() < settle and not self.stopping.is_set():
            states = self.transport.states(leaving)
            leaving = [j for j in leaving if states.get(j) in RUNNING_STATES]
            if leaving:
                self.stopping.wait(self.poll_s)
        now = self.clock()
        for j in ids:
            if failed.get(j) == STOPPING:
                continue  # still signalled: its grace is checked again (requeuehold_overdue)
            self.signalled.pop(j, None)
            self.signal_sent.pop(j, None)
            self.requeued_at[j] = now

    def _requeuehold_due(
        self, view: SlurmView | None, due: list[JobId], failed: dict[JobId, str]
    ) -> list[JobId]:
        """Requeue-hold the jobs whose grace is over and that still run and surely got
        the signal; returns the ones to wait for (not those whose signal was lost)."""
        states = self.transport.states(due)  # one command for every job due at once
        stuck = [j for j in due if states.get(j) == "RUNNING"]
        if stuck:
            reached = self._requeuehold_reached(view, stuck, failed)
            due = [j for j in due if j in reached or j not in stuck]  # not requeued
        return due

    def _requeuehold_reached(
        self, view: SlurmView | None, stuck: list[JobId], failed: dict[JobId, str]
    ) -> list[JobId]:
        """Requeue-hold the jobs still running after their grace whose signal surely
        reached them, by the nodes now, not as the round's observe saw them
        (_signal_reached); returns those (the others are in failed, with why)."""
        nodes = self.transport.read_nodes()
        reached = self._signal_reached(view, stuck, {n.name: n for n in nodes}, failed)
        if reached:
            self.transport.requeuehold(reached, failed)
            self.requeue_held.update(j for j in reached if j not in failed)
        return reached

    def signallable(
        self, view: SlurmView, ids: list[JobId], told: set[JobId], failed: dict[JobId, str]
    ) -> list[JobId]:
        """Jobs to signal now: strictly RUNNING ones not already told. A job that is
        CONFIGURING or COMPLETING cannot take a signal, and scancel would retry it
        by itself for minutes ("Job can not be altered now"), stalling the batch.

        Nor a run younger than fresh_run_s (Slurm's start time against this host's
        clock, which Slurm needs in step with slurmctld's): its batch script may not
        have set its trap or handler yet, and the signal's default action would kill
        it, FAILED and not requeued (CI, 26.05: a job signalled 12 ms after its launch
        died "RaisedSignal:10", RunTime 0). It keeps running and is signalled next
        round; the job placed on its GPUs starts once it has left them."""
        now = self.clock()
        out = []
        for j in ids:
            if j in told:
                continue
            sj = view.managed[j]
            age = now - sj.start_time
            if sj.state != "RUNNING":
                failed[j] = (
                    f"job is {sj.state}, cannot take the checkpoint signal now; retried next round"
                )
            elif sj.start_time and 0 <= age < self.fresh_run_s:
                failed[j] = (
                    f"its run started {age:.1f}s ago, too soon for the checkpoint signal "
                    "(its script may not handle it yet); signalled next round"
                )
            else:
                out.append(j)
        return out

    def requeuehold_overdue(self, view: SlurmView | None, failed: dict[JobId, str]) -> set[JobId]:
        """Requeue-hold the jobs an earlier act signalled (and did not wait for) that
        still run after their grace."""
        self._grace_checked &= set(self.signalled)
        if not self.signalled or view is None:
            return set()
        now = self.clock()
        seen = view.snapshot.time
        running = {j.job.id for j in view.snapshot.jobs if j.state is JobState.RUNNING}
        # A job COMPLETING has left its run (checkpointed, or done): not requeue-held.
        # (A running job of the snapshot is a managed one of the view.)
        overdue = [
            j
            for j, t in self.signalled.items()
            if t <= now and j in running and view.managed[j].state != "COMPLETING"
        ]
        for j in [j for j in self.signalled if j not in running]:
            del self.signalled[j]  # it left: how long it took, as far as observe saw
            self.checkpoint_waits[j] = max(0.0, seen - self.signal_sent.pop(j, seen))
        overdue = self._signal_reached(view, overdue, view.nodes, failed)
        if overdue:
            self.transport.requeuehold(overdue, failed)
            self.requeue_held.update(j for j in overdue if j not in failed)
            for j in overdue:
                self.signalled.pop(j, None)
                self.checkpoint_waits[j] = now - self.signal_sent.pop(j, now)
        return set(overdue)

    def _signal_reached(
        self,
        view: SlurmView | None,
        ids: list[JobId],
        nodes: Mapping[str, SlurmNode],
        failed: dict[JobId, str],
    ) -> list[JobId]:
        """Of jobs still running after the grace, those that surely got the checkpoint
        signal: requeue-holding the others would throw away their work.

        `scancel --signal` succeeds even when the node's slurmd is down, and the signal
        is then lost (not delivered when slurmd returns); slurmctld marks the node
        NOT_RESPONDING once its signal RPC fails or a ping goes unanswered, which may
        come well after the grace (a signal sent 1.5 s after a slurmd died was
        lost, and the job requeue-held at its grace end with the node not flagged yet).
        So a job is requeue-held only when its batch host's slurmd started before the
        signal (no restart since: the same slurmd took it), is not flagged, and answers
        now when asked directly (transport.steps_answer: the node's slurmd itself, not
        slurmctld's view of it). Any other job keeps running and is signalled again in
        a later round."""
        out = []
        for j in ids:
            sj = _managed_job(view, j)
            sent = self.signal_sent.get(j, self.clock())
            lost = []
            for name in sj.nodes if sj is not None else ():
                n = nodes.get(name)
                if n is not None and (
                    n.condition in UNREACHABLE or n.slurmd_start_time >= int(sent) - 1
                ):
                    lost.append(name)
            if lost:
                self.signalled.pop(j, None)
                failed[j] = (
                    f"the checkpoint signal may not have reached it: slurmd on "
                    f"{','.join(lost)} did not answer or restarted since; not requeued "
                    "(that would lose its work), signalled again in a later round"
                )
            else:
                out.append(j)
        answered = self.transport.steps_answer(out) if out else set()
        silent = [j for j in out if j not in answered]
        if silent:  # a job that has ended since has no step to ask: not in doubt
            states = self.transport.states(silent)
            silent = [j for j in silent if states.get(j) in RUNNING_STATES]
        for j in silent:
            sj = _managed_job(view, j)
            host = sj.nodes[0] if sj is not None and sj.nodes else "its node"
            self.signalled.pop(j, None)
            failed[j] = (
                f"the checkpoint signal may not have reached it: slurmd on {host} does not "
                "answer now (asked directly; slurmctld may not have flagged it yet); not "
                "requeued (that would lose its work), signalled again in a later round"
            )
        return [j for j in out if j not in silent]

    # --- between rounds -------------------------------------------------------------

    def grace_due_in(self) -> float | None:
        """Seconds until the earliest grace end among the signalled jobs enforce_grace
        has not looked at (<= 0: due now); None when there is none."""
        ends = [t for j, t in self.signalled.items() if j not in self._grace_checked]
        return min(ends) - self.clock() if ends else None

    def enforce_grace(self, view: SlurmView | None) -> tuple[list[JobId], dict[JobId, str]]:
        """Requeue-hold the signalled jobs still running after their grace, between
        rounds (the daemon's loop calls this when grace_due_in() reaches 0): a job that
        ignores the checkpoint signal then keeps its GPUs for its grace, not up to a
        round past it, and the job placed there starts. Each job is looked at once per
        signal (a failure here is left to the next act, which looks again); one whose
        signal may not have reached it is left running and signalled again next round
        (_signal_reached). Two commands (the jobs' states, the nodes) and the
        requeue-hold, only when a job is due. Returns the jobs requeue-held, and the
        due ones that were not, with why."""
        now = self.clock()
        due = [j for j, t in self.signalled.items() if t <= now and j not in self._grace_checked]
        self._grace_checked.update(due)  # first: a failure below must not make it spin
        failed: dict[JobId, str] = {}
        if not due:
            return [], failed
        # Once, without retries: while slurmctld is away this fails at once and leaves
        # the job to the next act, instead of sitting out the retries (~18 s) where the
        # next round would find the outage and report it.
        with self.transport.tried_once():
            states = self.transport.states(due)
            running = [j for j in due if states.get(j) == "RUNNING"]
            reached = self._requeuehold_reached(view, running, failed) if running else []
        return [j for j in reached if j not in failed], failed


def _managed_job(view: SlurmView | None, j: JobId) -> SlurmJob | None:
    """The job's record as the last observe saw it (None: not seen, or no view)."""
    return view.managed.get(j) if view is not None else None
