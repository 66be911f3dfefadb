"""SlurmBackend: the round loop's backend for a real Slurm, whatever the transport.

It holds the round's logic, the same through Slurm's commands (cli/) or slurmrestd
(rest/): observe turns what the transport reads into the round's snapshot (view.py),
act turns the round's placement into a plan (act_plan.py) and the plan into the
transport's primitives (transport.py), with the preemption component
(preemption.py) signalling, waiting and requeue-holding. Around them: which managed
jobs' old runs may still be on a node (old_runs.py), jobs given back to Slurm
(giveback.py), the AdminComment reasons (admin_comment.py).

act, in this order, one primitive per action kind whatever the number of jobs; the
signal runs beside the hold, place and release (a thread):

    signal       the checkpoint signal to the jobs preempted or moved
    hold         jobs released earlier and not placed this round
    place        each job's partition, nodes and GPUs (held jobs)
    release      the placed jobs whose update fully succeeded
    wait         only when a move or a pair's start needs a signalled job gone:
                 poll its state during its grace, requeue-hold it at the end
    requeuehold  jobs that did not exit within their grace (in the act that waited,
                 between rounds when the daemon calls enforce_grace, or the next act)

Managed jobs are never cancelled; jobs whose comment does not claim them for
slurm-gavel are never named in a command. Build one with cli.transport.cli_backend
or rest.transport.rest_backend.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Generic, TypeVar

from slurm_gavel.backends.slurm.act_plan import ActPlan, plan_act
from slurm_gavel.backends.slurm.admin_comment import comment_orders
from slurm_gavel.backends.slurm.arrays import expand_tasks
from slurm_gavel.backends.slurm.eligibility import HeldBack
from slurm_gavel.backends.slurm.ended_runs import RunEnds
from slurm_gavel.backends.slurm.fenced import FencedTransport, Gate
from slurm_gavel.backends.slurm.giveback import give_back_orders, refused_held
from slurm_gavel.backends.slurm.old_runs import DEFAULT_KILL_WAIT_S, MARGIN_S, OldRuns
from slurm_gavel.backends.slurm.preemption import Preemption
from slurm_gavel.backends.slurm.records import (
    RUNNING_STATES,
    WAITING_STATES,
    SlurmJob,
    read_as_before,
)
from slurm_gavel.backends.slurm.reservations import Reservations
from slurm_gavel.backends.slurm.shard_pairs import StartOrder
from slurm_gavel.backends.slurm.slurm_errors import SlurmUnreachable
from slurm_gavel.backends.slurm.transport import SlurmTransport
from slurm_gavel.backends.slurm.user_holds import requeued_by_owner
from slurm_gavel.backends.slurm.view import (
    ObservedMemo,
    SlurmView,
    add_vanished,
    build_view,
    is_managed_partition,
)
from slurm_gavel.core.run_ends import RunEnd
from slurm_gavel.domain.cluster_model import ActResult, ClusterSnapshot, JobState, RoundPlacement
from slurm_gavel.domain.model import Job, JobId

Transport = TypeVar("Transport", bound=SlurmTransport)


class SlurmBackend(Generic[Transport]):
    """A real Slurm cluster, reached through a SlurmTransport (see the module notes).
    Generic in the transport, so that `backend.transport` keeps its own type."""

    def __init__(
        self,
        transport: Transport,
        *,
        managed_partitions: Collection[str] | None = None,
        grace_s: float = 60.0,
        max_grace_s: float | None = None,
        checkpoint_signal: str = "USR1",
        poll_s: float = 0.5,
        wait_for_preempted: bool = True,
        clock: Callable[[], float] = time.time,
        old_run_clear_s: float | None = None,
        fresh_run_s: float = 0.0,
        gate: Gate | None = None,
    ) -> None:
        """managed_partitions: None manages every partition.
        grace_s: a job's grace when its comment asks none (grace=); max_grace_s caps an
        ask (None: grace_s).
        wait_for_preempted: when a move or a pair's start needs a signalled job gone,
        act() waits for it, up to its own grace, then starts them (False: never waits;
        such starts happen in a later act()). Other signalled jobs are never waited
        for: a later act() requeue-holds those still running after their grace.
        fresh_run_s: a running job whose run began less than this ago is not signalled
        (its script may not handle the signal yet); it is preempted a round later. The
        daemon passes FRESH_RUN_S, or half its round where that is shorter (run.py).
        old_run_clear_s: how long Slurm may take to kill a run found on a returning
        node (None: KillWait + a margin, read from Slurm when first needed).
        gate: asked before every action (fenced.py; the active/standby daemon's
        leadership check); None: every action goes out."""
        self.transport = transport
        # What changes jobs goes through `acts`: the transport, behind the gate if any.
        self.acts: SlurmTransport = transport if gate is None else FencedTransport(transport, gate)
        self.grace_cap_s = max(grace_s, grace_s if max_grace_s is None else max_grace_s)
        self.managed_partitions = None if managed_partitions is None else set(managed_partitions)
        self.wait_for_preempted = wait_for_preempted
        self.clock = clock
        self.preemption = Preemption(
            self.acts,
            grace_s=grace_s,
            max_grace_s=max_grace_s,
            checkpoint_signal=checkpoint_signal,
            fresh_run_s=fresh_run_s,
            poll_s=poll_s,
            clock=clock,
        )
        self.view: SlurmView | None = None
        self.refused_held: dict[JobId, str] = {}
        # The managed jobs' runs the last observe found ended, by what (ended_runs.py).
        self.run_ends: list[RunEnd] = []
        self._run_ends = RunEnds(checkpoint_signal)
        self.warnings: list[str] = []
        self._jobs_seen: dict[JobId, SlurmJob] = {}
        # Slurm resets a job's submit time when it is requeued; keep the first seen.
        self._first_submit: dict[JobId, float] = {}
        # Each job's node count as its request fixed it when first seen (layout.py):
        # the daemon's placements change the record's.
        self._layouts: dict[JobId, int | None] = {}
        # Each managed job's ObservedJob of the last view, kept while its record is the
        # same object (an unchanged listing record): view.build_view.
        self._observed_memo: dict[JobId, ObservedMemo] = {}
        self._active: dict[JobId, Job] = {}  # managed, not done, at the last observe
        self._resumed: set[JobId] = set()  # resume(): read as ended if not listed
        # the orders the last act released (job -> order): still pending, not re-issued
        self._released: dict[JobId, StartOrder] = {}
        # Jobs Slurm did not start for a limit, kept out for a while (eligibility.py).
        self.held_back = HeldBack()
        # Requeued jobs whose previous run may still be on a node (old_runs.py).
        self.old_runs = OldRuns()
        self._clear_s_known = old_run_clear_s is not None
        if old_run_clear_s is not None:
            self.old_runs.clear_s = old_run_clear_s

    # --- observe ---------------------------------------------------------------------

    def observe(self) -> ClusterSnapshot:
        nodes = self.transport.read_nodes()
        reservations, resv_note = self._read_reservations()
        # An array's pending tasks one job each: the daemon never names an array
        # (arrays.py).
        # The first observe after a restart watches the saved state's jobs: a
        # transport that cannot read jobs by id (22.05) reads every job's JSON, the
        # finished ones too, only if one of them is no longer listed.
        first = self.view is None
        watched = self._active.keys() | self._resumed if first else self._active
        jobs = expand_tasks(self.transport.read_jobs(nodes, first=first, watched=watched))
        listed = {j.job_id for j in jobs}
        ended = [j for j in self._active if j not in listed] + self._resumed_ended(listed)
        if ended:
            jobs += expand_tasks(self.transport.read_ended(ended))
        self._resumed = set()
        seen = self._jobs_seen
        for j in jobs:  # a changed record of the same comment: not read again
            read_as_before(j, seen.get(j.job_id))
        signalled = set(self.preemption.stopped_runs)  # before the next line forgets them
        jobs, notes, owners = self._mark_owners_requeueholds(jobs)
        now = self.clock()
        before = self.view.managed if self.view is not None else {}
        self.view = build_view(
            nodes,
            jobs,
            self.managed_partitions,
            now,
            first_submit=self._first_submit,
            held_back=self.held_back.reasons(now),
            reservations=reservations,
            layouts=self._layouts,
            memo=self._observed_memo,
        )
        self.held_back.observe(self.view.managed, now)
        self.preemption.forget_reruns(self.view.managed)
        self.run_ends = self._run_ends.ended(
            before, self.view.managed, now, signalled=signalled,
            requeue_held=self.preemption.requeue_held, owners=owners,
        )  # fmt: skip
        self.preemption.requeue_held = set()
        add_vanished(self.view, self._active, now)
        self._active = {
            o.job.id: o.job for o in self.view.snapshot.jobs if o.state is not JobState.DONE
        }
        self.view.warnings += notes + resv_note
        self.warnings = self.view.warnings
        # Held jobs claimed by a comment the grammar refuses, past their deadline, or
        # reservation jobs their reservation cannot hold: the daemon gives them back.
        self.refused_held = refused_held(jobs, self.managed_partitions, now)
        self.refused_held.update(
            (j, why) for j, why in self.view.give_back.items() if j not in self.refused_held
        )
        self._jobs_seen = {j.job_id: j for j in jobs}
        self.preemption.observed(now)
        self.old_runs.observe(nodes, self.view.managed.values(), now, RUNNING_STATES)
        return self.view.snapshot

    def _read_reservations(self) -> tuple[Reservations, list[str]]:
        """Slurm's reservations now; where they cannot be read, the round goes on with
        the nodes Slurm flags reserved kept off (reservations.py), and a warning."""
        try:
            return Reservations(tuple(self.transport.read_reservations())), []
        except SlurmUnreachable:
            raise
        except Exception as e:  # a refusal (PrivateData=reservations), a parse error
            note = f"Slurm's reservations could not be read ({str(e)[:200]}); nodes "
            return Reservations(known=False), [note + "flagged RESERVED are kept off"]

    def _mark_owners_requeueholds(
        self, jobs: list[SlurmJob]
    ) -> tuple[list[SlurmJob], list[str], set[JobId]]:
        """A run requeue-held by its owner since the last observe (not by the daemon:
        user_holds.py) gets hold=user in its comment, here and in Slurm, so that this
        round does not place it; the jobs as read, with those comments, warnings, and
        the jobs so found."""
        now = {
            j.job_id: j for j in jobs if is_managed_partition(j.partitions, self.managed_partitions)
        }
        orders = requeued_by_owner(self._jobs_seen, now, self.preemption.stopped_runs)
        running = {j.job_id for j in jobs if j.state not in WAITING_STATES}
        self.preemption.stopped_runs &= running  # seen waiting, or gone: forgotten
        if not orders:
            return jobs, [], set()
        failed: dict[JobId, str] = {}
        self.acts.relabel(orders, failed)
        notes = [f"job {j}: its owner's requeuehold not marked hold=user: {why}"
                 for j, why in failed.items()]  # fmt: skip
        marked = {o.job_id: o.comment for o in orders if o.job_id not in failed}
        jobs = [replace(j, comment=marked[j.job_id]) if j.job_id in marked else j for j in jobs]
        return jobs, notes, {o.job_id for o in orders}

    def resume(self, job_ids: Iterable[JobId]) -> None:
        """The jobs a restarted daemon managed when it stopped (its saved state): the
        first observe reads the final record of those no longer listed, so that jobs
        that ended while the daemon was down are reported done with how they ended
        (a job slurmctld has forgotten already just leaves, as before)."""
        self._resumed = set(job_ids)

    def _resumed_ended(self, listed: set[JobId]) -> list[JobId]:
        """resume()'s jobs not listed now (observe forgets them once their records are
        read, so that a failed read is made again by the next observe)."""
        return sorted(j for j in self._resumed if j not in listed and j not in self._active)

    def between_rounds(self) -> None:
        """The transport's upkeep while the daemon waits for the next round (the CLI's
        periodic full read: cli/reader.py), once a round has been observed."""
        if self.view is not None:
            self.transport.between_rounds()

    # --- act -------------------------------------------------------------------------

    def act(self, placement: RoundPlacement) -> ActResult:
        if self.view is None:
            self.observe()
        assert self.view is not None
        view = self.view
        pre = self.preemption
        plan = plan_act(placement, view, self.managed_partitions)
        pre.checkpoint_waits = {}
        failed: dict[JobId, str] = dict(plan.failed)
        plan.starts, released_waiting = self._not_released_already(plan, view)
        plan.starts = self._old_runs_gone(plan.starts, failed)
        fine = {o.job_id for o in self._old_runs_gone([a.order for a in plan.after_exit], failed)}
        plan.after_exit = [a for a in plan.after_exit if a.order.job_id in fine]
        told = set(pre.signalled)  # signalled in an earlier act, grace not over
        told |= pre.requeuehold_overdue(view, failed)
        to_signal = pre.signallable(view, plan.to_signal, told, failed)
        # The signal goes out beside the hold, place and release, not before them: they
        # name disjoint jobs (a moving job is started only after the wait below), and a
        # job released now onto a signalled job's GPUs starts only once that job has
        # left them. Each command's slurmctld RPCs then overlap the other's round trips
        # (benchmarks/README.md, "A daemon round"). Its failures are its own until joined.
        signal_failed: dict[JobId, str] = {}
        with ThreadPoolExecutor(1, thread_name_prefix="gavel-signal") as pool:
            beside = pool.submit(pre.signal, view, to_signal, signal_failed) if to_signal else None
            if plan.hold:
                self.acts.hold(plan.hold, failed)
            started = self._start(plan.starts, failed)
        signalled = beside.result() if beside is not None else []
        failed.update(signal_failed)
        signalled += [j for j in plan.to_signal if j in told and j not in failed]
        moved: list[JobId] = []
        # Wait only for the signalled jobs a start of this act needs gone: a job that
        # moves, a job leaving the GPU a pair is to share. The others exit on their own
        # (their GPUs' new jobs, released already, start then); a later act requeue-holds
        # any still running after its grace (requeuehold_overdue). docs/design.md 1.4.
        needed = {o.job_id for o in plan.moves} | {a.holder for a in plan.after_exit}
        awaited = [j for j in signalled if j in needed]
        if awaited and self.wait_for_preempted:
            pre.wait_and_requeuehold(view, awaited, failed)
            moving = [o for o in plan.moves if o.job_id in signalled and o.job_id not in failed]
            moved = self._start(moving, failed)
            started += self._start(pre.half_freed(plan.after_exit, failed), failed)
        else:
            for o in plan.moves:  # started by a later act(), once the job has exited
                failed.setdefault(o.job_id, "preempted; restarts in a later round after exit")
            for a in plan.after_exit:
                failed.setdefault(a.order.job_id, a.why)
        orders = {o.job_id: o for o in [*plan.starts, *plan.moves]}
        orders.update((a.order.job_id, a.order) for a in plan.after_exit)
        # A job kept because Slurm has not started its release yet keeps its order
        # here too: the next act, finding it still pending, keeps it again rather than
        # updating it once more (a race with Slurm's start of it).
        self._released = {**released_waiting, **{j: orders[j] for j in [*started, *moved]}}
        # A signalled move that did not start (its wait or its start failed, or it starts
        # after exit in a later act) left its GPUs all the same: Slurm counts a restart,
        # so the round reports it preempted, and the log and metrics count every restart.
        stopped = [*plan.preempt, *(o.job_id for o in plan.moves if o.job_id not in moved)]
        return ActResult(
            started=tuple(started),
            kept=tuple(plan.keep),
            preempted=tuple(j for j in stopped if j in signalled),
            moved=tuple(moved),
            failed=tuple(failed.items()),
        )

    def _start(self, orders: list[StartOrder], failed: dict[JobId, str]) -> list[JobId]:
        """Place, then release only the jobs whose update fully succeeded (a failed
        update may be half applied, and a released job would start anywhere)."""
        if not orders:
            return []
        assert self.view is not None
        self.acts.place(orders, self.view.nodes, failed)
        placed = [o.job_id for o in orders if o.job_id not in failed]
        if not placed:
            return []
        self.preemption.wait_out_requeue_second(self.view, placed)
        self.acts.release(placed, failed)
        return [j for j in placed if j not in failed]

    def _not_released_already(
        self, plan: ActPlan, view: SlurmView
    ) -> tuple[list[StartOrder], dict[JobId, StartOrder]]:
        """The starts to issue: not those an earlier act released with the same order
        and that Slurm has not started yet (pending, not held). Updating such a job
        again races Slurm's own start of it (22.05 and 26.05: "Invalid node name
        specified"); it keeps its lease instead. Jobs started at the end of an act
        (moves, pairs beside a stopping job) are often still pending when the next round
        comes, and under load a round later still. Also the orders so kept, which this
        act remembers as released."""
        out = []
        waiting = {}
        for o in plan.starts:
            sj = view.managed.get(o.job_id)
            if self._released.get(o.job_id) == o and sj is not None and not sj.held:
                plan.keep.append(o.job_id)
                waiting[o.job_id] = o
            else:
                out.append(o)
        return out, waiting

    def _old_runs_gone(
        self, orders: list[StartOrder], failed: dict[JobId, str]
    ) -> list[StartOrder]:
        """The start orders of jobs whose previous run is provably gone from every node
        it ran on; the others wait, with the reason (old_runs.py)."""
        assert self.view is not None
        if not any(r.unsure for r in self.old_runs.runs.values()):
            return orders
        self._read_clear_s()
        now = self.clock()
        out = []
        for o in orders:
            why = self.old_runs.why_not_yet(self.view.managed[o.job_id], now)
            if why is None:
                out.append(o)
            else:
                failed[o.job_id] = why
        return out

    def _read_clear_s(self) -> None:
        """KillWait (once, and only when a job waits on an old run): how long Slurm may
        take to kill a run found on a returning node."""
        if self._clear_s_known:
            return
        self._clear_s_known = True
        kill_wait = self.transport.kill_wait_s()
        self.old_runs.clear_s = (DEFAULT_KILL_WAIT_S if kill_wait is None else kill_wait) + MARGIN_S

    # --- between rounds: the preempted jobs' graces -------------------------------------

    def grace_due_in(self) -> float | None:
        """Seconds until the earliest grace end enforce_grace has not looked at."""
        return self.preemption.grace_due_in()

    def enforce_grace(self) -> tuple[list[JobId], dict[JobId, str]]:
        """Requeue-hold the signalled jobs still running after their grace
        (Preemption.enforce_grace); returns those, and the due ones that were not."""
        return self.preemption.enforce_grace(self.view)

    def stop_waiting(self) -> None:
        """The daemon is stopping (its InterruptibleWaits hook, from the SIGTERM
        handler): an act in progress ends its wait for preempted jobs now (their moves
        and pair starts fail with the reason, the jobs stay signalled), so the round is
        logged and saved before the process exits."""
        self.preemption.stopping.set()

    # --- the signals sent, across daemons (active/standby) -------------------------------

    def signals(self) -> dict[JobId, float]:
        """The jobs signalled and not yet seen gone or requeue-held -> when (this
        backend's clock: wall time). What a daemon taking over needs so that it
        neither signals them again nor leaves them running past their grace."""
        return dict(self.preemption.signal_sent)

    def restore_signals(self, sent: Mapping[JobId, float]) -> None:
        """Signals another daemon sent (signals()): each job is told already, and its
        grace ends at its signal plus the longest grace a job may get (its comment's
        ask is read only once observed; never sooner than it could have been told)."""
        pre = self.preemption
        for j, t in sent.items():
            if j in pre.signal_sent:
                continue
            pre.signal_sent[j] = t
            pre.signalled[j] = t + self.grace_cap_s
            pre.stopped_runs.add(j)
            pre.restored.add(j)

    @property
    def checkpoint_waits(self) -> dict[JobId, float]:
        """The last act's signalled jobs -> seconds until each left (metrics)."""
        return self.preemption.checkpoint_waits

    # --- around the round ------------------------------------------------------------

    def private_data(self) -> str | None:
        """Slurm's PrivateData ("none", "jobs,usage"), or None when it cannot be read:
        what `status_privacy: auto` follows (status_private.py)."""
        return self.transport.private_data()

    def give_back(self, reasons: Mapping[JobId, str]) -> dict[JobId, str]:
        """Release held jobs the daemon cannot use to Slurm's own scheduling, the reason
        in their comment (giveback.py); returns those that failed, with why."""
        if self.view is None or not reasons:
            return {}
        scales = {o.job.id: o.job.scale_factor for o in self.view.snapshot.jobs}
        orders = give_back_orders(dict(reasons), self._jobs_seen, scales)
        failed: dict[JobId, str] = {}
        if orders:
            self.acts.relabel(orders, failed)
            # A job its owner holds stays held, now a plain job its owner may release.
            relabelled = [
                o.job_id
                for o in orders
                if o.job_id not in failed and not self._jobs_seen[o.job_id].reading.user_hold
            ]
            if relabelled:
                self.acts.release(relabelled, failed)
            # no longer the daemon's (a plain comment now): not watched for its end,
            # which would be reported as a managed job gone unseen (add_vanished)
            for o in orders:
                if o.job_id not in failed:
                    self._active.pop(o.job_id, None)
        return failed

    def set_admin_comments(self, texts: Mapping[JobId, str]) -> dict[JobId, str]:
        """Each job's AdminComment to the daemon's reason (admin_comment.py); returns
        those that failed, with why."""
        failed: dict[JobId, str] = {}
        for order in comment_orders(texts):
            self.acts.admin_comment(order, failed)
        return failed

    @property
    def commands_issued(self) -> int:
        return self.transport.commands_issued
