"""The checkpoint signal, the grace and the requeue-hold of preempted jobs, for the
Slurm backends (SlurmCluster mixes this in; SlurmRestCluster overrides the primitives
it calls: _send_signal, _states, _requeuehold, _fetch_nodes).

Each signalled job has its own grace deadline (_signalled). An act waits for a
signalled job only when a start of the same act needs it gone (a move, a pair's GPU:
_wait_and_requeuehold); the others are left to exit on their own, and those still
running when their grace ends are requeue-held then, between rounds (enforce_grace,
called by the daemon's loop at grace_due_in), or else by the next act
(_requeuehold_overdue). Either way a job is requeue-held only when its signal surely
reached it (_signal_reached).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterator, Mapping

from slurm_gavel.backends.slurm.from_json import parse_nodes
from slurm_gavel.backends.slurm.grace import job_grace
from slurm_gavel.backends.slurm.old_runs import UNREACHABLE
from slurm_gavel.backends.slurm.records import SlurmJob, SlurmNode
from slurm_gavel.backends.slurm.shard_pairs import RUNNING_STATES, AfterExit, StartOrder
from slurm_gavel.backends.slurm.view import SlurmView, job_list
from slurm_gavel.core.cluster_model import JobState
from slurm_gavel.core.model import JobId

log = logging.getLogger(__name__)

# A run younger than this (seconds) is not signalled yet: what the daemon gives
# SlurmCluster's fresh_run_s (at most half its round: commands/run.py). Slurm's start
# time is in whole seconds, so it spares a run's first FRESH_RUN_S - 1 s at least.
FRESH_RUN_S = 5.0


def requeuehold_argv(ids: list[JobId]) -> list[str]:
    """`scontrol requeuehold Incomplete`: the preemption of jobs that ignored the
    checkpoint signal. Without `Incomplete`, Slurm also requeues a batch job that has
    ended (COMPLETED, FAILED, or still COMPLETING), so a job that finished between
    the daemon's last look at it and this command ran again from its last checkpoint
    (CI, 24.11: a job done during a slurmd restart ran a second time). With it, Slurm
    requeues only CONFIGURING, RUNNING, STOPPED or SUSPENDED jobs and skips the rest
    without an error, in one step: no race (22.05 to 26.05; slurmrestd 26.05's
    POST /jobs/requeue takes the same flag)."""
    return ["scontrol", "requeuehold", "Incomplete", job_list(ids)]


class Preemption:
    """Signal, grace and requeue-hold: the state and steps SlurmCluster.act uses."""

    view: SlurmView | None
    clock: Callable[[], float]
    poll_s: float
    grace_s: float
    max_grace_s: float | None
    fresh_run_s: float  # a run younger than this is not signalled (_signallable)
    checkpoint_waits: dict[JobId, float]  # the last act's: seconds until each left
    _signalled: dict[JobId, float]  # job -> grace deadline (clock)
    _signal_sent: dict[JobId, float]  # job -> when signalled (clock)
    _requeued_at: dict[JobId, float]  # seen leaving its run in this act (clock)
    _grace_capped_told: set[JobId]  # logged once per job
    _grace_checked: set[JobId]  # signalled jobs enforce_grace has looked at
    _allow_newer: bool

    # --- primitives (the backend's) ------------------------------------------------

    def _send_signal(self, ids: list[JobId], failed: dict[JobId, str]) -> set[JobId]:
        raise NotImplementedError

    def _states(self, ids: list[JobId]) -> dict[JobId, str]:
        raise NotImplementedError

    def _requeuehold(self, ids: list[JobId], failed: dict[JobId, str]) -> None:
        raise NotImplementedError

    def _fetch_nodes(self) -> dict:
        raise NotImplementedError

    # --- steps ----------------------------------------------------------------------

    def _half_freed(self, after: list[AfterExit], failed: dict[JobId, str]) -> list[StartOrder]:
        """The pair members whose GPU's stopping job has now left it (the act waited for
        it): started now rather than a round later. A pair whose stopping job still runs
        (its requeue failed, or it is still completing) waits, both of it."""
        if not after:
            return []
        holders = sorted({a.holder for a in after})
        states = self._states(holders)
        stuck = {h for h in holders if h in failed or states.get(h) in RUNNING_STATES}
        waiting = {a.order.job_id for a in after if a.holder in stuck}
        waiting |= {a.partner for a in after if a.order.job_id in waiting and a.partner}
        for a in after:
            if a.order.job_id in waiting:
                failed.setdefault(a.order.job_id, a.why)
        return [a.order for a in after if a.order.job_id not in waiting]

    def _signal(self, ids: list[JobId], failed: dict[JobId, str]) -> list[JobId]:
        if not ids:
            return []
        bad = self._send_signal(ids, failed)
        now = self.clock()
        ok = [j for j in ids if j not in bad]
        for j in ok:
            self._signalled[j] = now + self._grace_of(j)
            self._signal_sent[j] = now
            self._grace_checked.discard(j)
        return ok

    def _grace_of(self, j: JobId) -> float:
        sj = self._managed_job(j)
        if sj is None:
            return self.grace_s
        g = job_grace(sj.comment, default_s=self.grace_s, cap_s=self.max_grace_s)
        if g.capped and j not in self._grace_capped_told:
            self._grace_capped_told.add(j)
            log.warning(
                "job %s asks grace=%s; given %gs, the admin's checkpoint.max_grace_seconds",
                j, g.asked, g.seconds,
            )  # fmt: skip
        return g.seconds

    def _wait_out_requeue_second(self, ids: list[JobId]) -> None:
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
            sj = self._managed_job(j)
            if sj is not None and sj.restarts > 0:
                latest = max(latest, float(sj.submit_time))
            latest = max(latest, float(int(self._requeued_at.pop(j, 0.0))))
        wait = latest + 1.05 - self.clock()
        if latest and wait > 0:
            time.sleep(min(wait, 1.1))

    def _wait_and_requeuehold(self, ids: list[JobId], failed: dict[JobId, str]) -> None:
        """Wait for signalled jobs to exit, each up to its own grace deadline: a job
        still running at its deadline is requeue-held then, not when the longest grace
        of the round ends, and the wait stops once no job is inside its grace."""
        start = self.clock()
        deadline = {j: self._signalled.get(j, start + self._grace_of(j)) for j in ids}
        sent = {j: self._signal_sent.get(j, start) for j in ids}
        running = list(ids)
        leaving: list[JobId] = []  # requeue-held (or exiting) jobs to let settle
        while running:
            states = self._states(running)
            now = self.clock()
            for j in running:
                if states.get(j) not in RUNNING_STATES:
                    self.checkpoint_waits[j] = now - sent[j]
            running = [j for j in running if states.get(j) in RUNNING_STATES]
            due = [j for j in running if deadline[j] <= now]
            if due:
                self.checkpoint_waits.update((j, now - sent[j]) for j in due)
                leaving += self._requeuehold_due(due, failed)
                running = [j for j in running if j not in due]
            if running:
                soonest = min(deadline[j] for j in running)
                time.sleep(max(0.0, min(self.poll_s, soonest - now)))
        # Wait (briefly) until requeued jobs have left COMPLETING, so a move can place them.
        settle = self.clock() + 15
        while leaving and self.clock() < settle:
            states = self._states(leaving)
            leaving = [j for j in leaving if states.get(j) in RUNNING_STATES]
            if leaving:
                time.sleep(self.poll_s)
        now = self.clock()
        for j in ids:
            self._signalled.pop(j, None)
            self._signal_sent.pop(j, None)
            self._requeued_at[j] = now

    def _requeuehold_due(self, due: list[JobId], failed: dict[JobId, str]) -> list[JobId]:
        """Requeue-hold the jobs whose grace is over and that still run and surely got
        the signal; returns the ones to wait for (not those whose signal was lost)."""
        states = self._states(due)  # one command for every job due at once
        stuck = [j for j in due if states.get(j) == "RUNNING"]
        if stuck:
            reached = self._requeuehold_reached(stuck, failed)
            due = [j for j in due if j in reached or j not in stuck]  # not requeued
        return due

    def _requeuehold_reached(self, stuck: list[JobId], failed: dict[JobId, str]) -> list[JobId]:
        """Requeue-hold the jobs still running after their grace whose signal surely
        reached them, by the nodes now, not as the round's observe saw them
        (_signal_reached); returns those (the others are in failed, with why)."""
        _, nodes = parse_nodes(self._fetch_nodes(), allow_newer=self._allow_newer)
        reached = self._signal_reached(stuck, {n.name: n for n in nodes}, failed)
        if reached:
            self._requeuehold(reached, failed)
        return reached

    def _signallable(
        self, ids: list[JobId], told: set[JobId], failed: dict[JobId, str]
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
        assert self.view is not None
        now = self.clock()
        out = []
        for j in ids:
            if j in told:
                continue
            sj = self.view.managed[j]
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

    def _requeuehold_overdue(self, failed: dict[JobId, str]) -> set[JobId]:
        """Requeue-hold the jobs an earlier act signalled (and did not wait for) that
        still run after their grace."""
        self._grace_checked &= set(self._signalled)
        if not self._signalled or self.view is None:
            return set()
        now = self.clock()
        seen = self.view.snapshot.time
        running = {j.job.id for j in self.view.snapshot.jobs if j.state is JobState.RUNNING}
        # A job COMPLETING has left its run (checkpointed, or done): not requeue-held.
        # (A running job of the snapshot is a managed one of the view.)
        overdue = [
            j
            for j, t in self._signalled.items()
            if t <= now and j in running and self.view.managed[j].state != "COMPLETING"
        ]
        for j in [j for j in self._signalled if j not in running]:
            del self._signalled[j]  # it left: how long it took, as far as observe saw
            self.checkpoint_waits[j] = max(0.0, seen - self._signal_sent.pop(j, seen))
        overdue = self._signal_reached(overdue, self.view.nodes, failed)
        if overdue:
            self._requeuehold(overdue, failed)
            for j in overdue:
                self._signalled.pop(j, None)
                self.checkpoint_waits[j] = now - self._signal_sent.pop(j, now)
        return set(overdue)

    def _managed_job(self, j: JobId) -> SlurmJob | None:
        """The job's record as the last observe saw it (None: not seen, or no view)."""
        return self.view.managed.get(j) if self.view is not None else None

    def _signal_reached(
        self, ids: list[JobId], nodes: Mapping[str, SlurmNode], failed: dict[JobId, str]
    ) -> list[JobId]:
        """Of jobs still running after the grace, those that surely got the checkpoint
        signal: requeue-holding the others would throw away their work.

        `scancel --signal` succeeds even when the node's slurmd is down, and the signal
        is then lost (not delivered when slurmd returns); slurmctld marks the node
        NOT_RESPONDING once its signal RPC fails (within MessageTimeout). So a job with
        a node that does not answer now, or whose slurmd (re)started after the signal,
        is not requeue-held: it keeps running and is signalled again next round."""
        out = []
        for j in ids:
            sj = self._managed_job(j)
            sent = self._signal_sent.get(j, self.clock())
            lost = []
            for name in sj.nodes if sj is not None else ():
                n = nodes.get(name)
                if n is not None and (
                    n.condition in UNREACHABLE or n.slurmd_start_time >= int(sent) - 1
                ):
                    lost.append(name)
            if lost:
                self._signalled.pop(j, None)
                failed[j] = (
                    f"the checkpoint signal may not have reached it: slurmd on "
                    f"{','.join(lost)} did not answer or restarted since; not requeued "
                    "(that would lose its work), signalled again in a later round"
                )
            else:
                out.append(j)
        return out

    # --- between rounds -------------------------------------------------------------

    def grace_due_in(self) -> float | None:
        """Seconds until the earliest grace end among the signalled jobs enforce_grace
        has not looked at (<= 0: due now); None when there is none."""
        ends = [t for j, t in self._signalled.items() if j not in self._grace_checked]
        return min(ends) - self.clock() if ends else None

    def enforce_grace(self) -> tuple[list[JobId], dict[JobId, str]]:
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
        due = [j for j, t in self._signalled.items() if t <= now and j not in self._grace_checked]
        self._grace_checked.update(due)  # first: a failure below must not make it spin
        failed: dict[JobId, str] = {}
        if not due:
            return [], failed
        with self._tried_once():
            states = self._states(due)
            running = [j for j in due if states.get(j) == "RUNNING"]
            reached = self._requeuehold_reached(running, failed) if running else []
        return [j for j in reached if j not in failed], failed

    @contextlib.contextmanager
    def _tried_once(self) -> Iterator[None]:
        """Slurm's commands (and slurmrestd's requests) without their retries: while
        slurmctld is away, enforce_grace fails at once and leaves the job to the next
        act, instead of sitting out the retries (~18 s) where the next round would find
        the outage and report it."""
        found = (getattr(self, "commands", None), getattr(self, "rest", None))
        clients = [c for c in found if c is not None]
        saved = [c.retries for c in clients]
        for c in clients:
            c.retries = 0
        try:
            yield
        finally:
            for c, retries in zip(clients, saved, strict=True):
                c.retries = retries
