"""SlurmCluster: the round loop's backend for a real Slurm, through its commands.

observe, in the JSON format of the release (detected once, slurm_release.detect_cli:
`sinfo -V` + `squeue --json=list`), two or three commands per round:

    nodes        scontrol --json=vX show nodes   (22.05: sinfo --json)
    list         squeue -h -t <waiting and running states> -O <fields>: every job's
                 fields as text, to tell which changed (slurm/cli/listing.py)
    jobs         squeue --json=vX -t all -j ID,...  only the new or changed jobs the
                 listing's text cannot describe (slurm/cli/jobs_from_text.py: "(null)"
                 values, starts on shards or whole nodes); every waiting and running
                 job in the first round, every 10th (between rounds, when the daemon
                 calls between_rounds), and on 22.05 (whose --json ignores -j and -t)
                 in any round in which a changed job needs its JSON or a managed job
                 left the listing; none when the text describes every change
    ended        squeue --json=vX -t all -j ID,...  only in a round where a managed
                 job left that list (how it ended: completed or failed)

so the JSON read per round follows the jobs that changed, and does not grow with
finished jobs (on 22.05 MinJobAge bounds the full read).
act, one command per action kind, whatever the number of jobs; the signal runs
beside the hold, place and release (a thread), which run in that order:

    signal       scancel --signal=USR1 --batch ID ID ...   (preempt and move)
    hold         scontrol hold ID,ID,...   (released earlier, not placed this round)
    place        scontrol, reading one `update JobId=...` line per job on stdin
                 (from 64 jobs on, two scontrol side by side, half the lines each)
    release      scontrol release ID,ID,...
    wait         squeue -h -j ID,... -o "%i %T"  (polled during the grace, only when a
                 move or a pair's start needs a signalled job gone)
    requeuehold  scontrol requeuehold ID,...  (did not exit 99 within the grace: in the
                 act that waited, else in the next act)
    give_back    scontrol update JobId=ID "Comment=gavel-released: <why>", per held job
                 the daemon cannot use, then release (slurm/giveback.py)

Managed jobs are never cancelled; jobs whose comment does not claim them for
slurm-gavel are never named in a command.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Collection, Mapping
from concurrent.futures import ThreadPoolExecutor

from slurm_gavel.backends.slurm.admin_comment import CommentOrder, comment_orders
from slurm_gavel.backends.slurm.cli.commands import (
    SlurmCommands,
    SlurmUnreachable,
    note_errors,
)
from slurm_gavel.backends.slurm.cli.listing import (
    IncrementalJobs,
)
from slurm_gavel.backends.slurm.cli.reader import CliReads
from slurm_gavel.backends.slurm.from_json import parse_nodes
from slurm_gavel.backends.slurm.giveback import GiveBack, give_back_orders, refused_held
from slurm_gavel.backends.slurm.old_runs import (
    DEFAULT_KILL_WAIT_S,
    MARGIN_S,
    OldRuns,
    kill_wait_seconds,
)
from slurm_gavel.backends.slurm.preemption import Preemption, requeuehold_argv
from slurm_gavel.backends.slurm.private_data import read_private_data
from slurm_gavel.backends.slurm.record_cache import JobRecordCache
from slurm_gavel.backends.slurm.records import SlurmJob
from slurm_gavel.backends.slurm.releases import CliFormat
from slurm_gavel.backends.slurm.shard_pairs import StartOrder
from slurm_gavel.backends.slurm.view import (
    RUNNING_STATES,
    ActPlan,
    SlurmView,
    add_vanished,
    build_view,
    job_list,
    plan_act,
    render_update,
)
from slurm_gavel.core.cluster_model import ActResult, ClusterSnapshot, JobState, RoundPlacement
from slurm_gavel.core.model import Job, JobId

log = logging.getLogger(__name__)

# From this many jobs to place in one act, two scontrol processes share the updates.
PLACE_SPLIT_AT = 64


class SlurmCluster(CliReads, Preemption):
    """A real Slurm cluster driven through sinfo/squeue/scontrol/scancel."""

    def __init__(
        self,
        *,
        managed_partitions: Collection[str] | None = None,
        env: Mapping[str, str] | None = None,
        commands: SlurmCommands | None = None,
        grace_s: float = 60.0,
        max_grace_s: float | None = None,
        checkpoint_signal: str = "USR1",
        poll_s: float = 0.5,
        wait_for_preempted: bool = True,
        clock: Callable[[], float] = time.time,
        data_parser: str | None = None,
        old_run_clear_s: float | None = None,
        fresh_run_s: float = 0.0,
    ) -> None:
        """managed_partitions: None manages every partition. env: e.g. SLURM_CONF.
        grace_s: a job's grace when its comment asks none (grace=); max_grace_s caps an
        ask (None: grace_s).
        wait_for_preempted: when a move or a pair's start needs a signalled job gone,
        act() waits for it, up to its own grace, then starts them (False: never waits;
        such starts happen in a later act()). Other signalled jobs are never waited
        for: a later act() requeue-holds those still running after their grace.
        fresh_run_s: a running job whose run began less than this ago is not signalled
        (its script may not handle the signal yet); it is preempted a round later. The
        daemon passes FRESH_RUN_S, or half its round where that is shorter (run.py).
        data_parser: e.g. "v0.0.45", the JSON format to ask the CLI for, skipping the
        check that Slurm is a release slurm-gavel knows (default: the environment's
        SLURM_GAVEL_DATA_PARSER, else detected)."""
        self.managed_partitions = None if managed_partitions is None else set(managed_partitions)
        self.commands = commands or SlurmCommands(env)
        self.grace_s = grace_s
        self.fresh_run_s = fresh_run_s
        self.max_grace_s = max_grace_s
        self._grace_capped_told: set[JobId] = set()  # logged once per job
        self._grace_checked: set[JobId] = set()  # enforce_grace looked at them
        self.checkpoint_signal = checkpoint_signal
        self.poll_s = poll_s
        self.wait_for_preempted = wait_for_preempted
        self.clock = clock
        self.view: SlurmView | None = None
        self.refused_held: dict[JobId, str] = {}
        self._jobs_seen: dict[JobId, SlurmJob] = {}
        self.warnings: list[str] = []
        self._signalled: dict[JobId, float] = {}  # job -> grace deadline (clock)
        self._signal_sent: dict[JobId, float] = {}  # job -> when signalled (clock)
        # the last act's signalled jobs -> seconds until they left (metrics)
        self.checkpoint_waits: dict[JobId, float] = {}
        # Slurm resets a job's submit time when it is requeued; keep the first seen.
        self._first_submit: dict[JobId, float] = {}
        self._active: dict[JobId, Job] = {}  # managed, not done, at the last observe
        self._resumed: set[JobId] = set()  # resume(): read as ended if not listed
        self._requeued_at: dict[JobId, float] = {}  # seen leaving its run in this act (clock)
        # the orders the last act released (job -> order): still pending, not re-issued
        self._released: dict[JobId, StartOrder] = {}
        self.data_parser = data_parser or os.environ.get("SLURM_GAVEL_DATA_PARSER") or None
        self._format: CliFormat | None = None  # detected on the first observe
        # Requeued jobs whose previous run may still be on a node (slurm/old_runs.py);
        # old_run_clear_s None: KillWait + a margin, read from Slurm when first needed.
        self.old_runs = OldRuns()
        self._clear_s_known = old_run_clear_s is not None
        if old_run_clear_s is not None:
            self.old_runs.clear_s = old_run_clear_s
        self._allow_newer = False  # parse JSON of a release newer than known (override)
        self._job_cache = JobRecordCache()  # unchanged squeue records parsed once
        self._listed = IncrementalJobs()  # JSON read only for new or changed jobs

    # --- observe ---------------------------------------------------------------------

    def observe(self) -> ClusterSnapshot:
        _, nodes = parse_nodes(self._fetch_nodes(), allow_newer=self._allow_newer)
        jobs = self._fetch_jobs(nodes)
        listed = {j.job_id for j in jobs}
        ended = [j for j in self._active if j not in listed] + self._resumed_ended(listed)
        if ended:
            jobs += self._ended_jobs(ended)
        self._resumed = set()
        now = self.clock()
        self.view = build_view(
            nodes, jobs, self.managed_partitions, now, first_submit=self._first_submit
        )
        add_vanished(self.view, self._active, now)
        self._active = {
            o.job.id: o.job for o in self.view.snapshot.jobs if o.state is not JobState.DONE
        }
        self.warnings = self.view.warnings
        # Held jobs claimed by a comment the grammar refuses: the daemon gives them back.
        self.refused_held = refused_held(jobs, self.managed_partitions)
        self._jobs_seen = {j.job_id: j for j in jobs}
        self._requeued_at = {j: t for j, t in self._requeued_at.items() if now - t < 5}
        self.old_runs.observe(nodes, self.view.managed.values(), now, RUNNING_STATES)
        return self.view.snapshot

    # --- act -------------------------------------------------------------------------

    def act(self, placement: RoundPlacement) -> ActResult:
        if self.view is None:
            self.observe()
        assert self.view is not None
        plan = plan_act(placement, self.view, self.managed_partitions)
        self.checkpoint_waits = {}
        failed: dict[JobId, str] = dict(plan.failed)
        plan.starts = self._not_released_already(plan, self.view)
        plan.starts = self._old_runs_gone(plan.starts, failed)
        fine = {o.job_id for o in self._old_runs_gone([a.order for a in plan.after_exit], failed)}
        plan.after_exit = [a for a in plan.after_exit if a.order.job_id in fine]
        told = set(self._signalled)  # signalled in an earlier act, grace not over
        told |= self._requeuehold_overdue(failed)
        to_signal = self._signallable(plan.to_signal, told, failed)
        # The signal goes out beside the hold, place and release, not before them: they
        # name disjoint jobs (a moving job is started only after the wait below), and a
        # job released now onto a signalled job's GPUs starts only once that job has
        # left them. Each command's slurmctld RPCs then overlap the other's round trips
        # (benchmarks/README.md, "A daemon round"). Its failures are its own until joined.
        signal_failed: dict[JobId, str] = {}
        with ThreadPoolExecutor(1, thread_name_prefix="gavel-signal") as pool:
            beside = pool.submit(self._signal, to_signal, signal_failed) if to_signal else None
            if plan.hold:
                self._hold(plan.hold, failed)
            started = self._start(plan.starts, failed)
        signalled = beside.result() if beside is not None else []
        failed.update(signal_failed)
        signalled += [j for j in plan.to_signal if j in told and j not in failed]
        moved: list[JobId] = []
        # Wait only for the signalled jobs a start of this act needs gone: a job that
        # moves, a job leaving the GPU a pair is to share. The others exit on their own
        # (their GPUs' new jobs, released already, start then); a later act requeue-holds
        # any still running after its grace (_requeuehold_overdue). docs/design.md 1.4.
        needed = {o.job_id for o in plan.moves} | {a.holder for a in plan.after_exit}
        awaited = [j for j in signalled if j in needed]
        if awaited and self.wait_for_preempted:
            self._wait_and_requeuehold(awaited, failed)
            moving = [o for o in plan.moves if o.job_id in signalled and o.job_id not in failed]
            moved = self._start(moving, failed)
            started += self._start(self._half_freed(plan.after_exit, failed), failed)
        else:
            for o in plan.moves:  # started by a later act(), once the job has exited
                failed.setdefault(o.job_id, "preempted; restarts in a later round after exit")
            for a in plan.after_exit:
                failed.setdefault(a.order.job_id, a.why)
        orders = {o.job_id: o for o in [*plan.starts, *plan.moves]}
        orders.update((a.order.job_id, a.order) for a in plan.after_exit)
        self._released = {j: orders[j] for j in [*started, *moved]}
        return ActResult(
            started=tuple(started),
            kept=tuple(plan.keep),
            preempted=tuple(j for j in plan.preempt if j in signalled),
            moved=tuple(moved),
            failed=tuple(failed.items()),
        )

    def _not_released_already(self, plan: ActPlan, view: SlurmView) -> list[StartOrder]:
        """The starts to issue: not those the last act released with the same order and
        that Slurm has not started yet (pending, not held). Updating such a job again
        races Slurm's own start of it (22.05: "Invalid node name specified"); it keeps
        its lease instead. Jobs started at the end of an act (moves, pairs beside a
        stopping job) are often still pending when the next round comes."""
        out = []
        for o in plan.starts:
            sj = view.managed.get(o.job_id)
            if self._released.get(o.job_id) == o and sj is not None and not sj.held:
                plan.keep.append(o.job_id)
            else:
                out.append(o)
        return out

    def _old_runs_gone(
        self, orders: list[StartOrder], failed: dict[JobId, str]
    ) -> list[StartOrder]:
        """The start orders of jobs whose previous run is provably gone from every node
        it ran on; the others wait, with the reason (slurm/old_runs.py)."""
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
        """KillWait from `scontrol show config` (once, and only when a job waits on an
        old run): how long Slurm may take to kill a run found on a returning node."""
        if self._clear_s_known:
            return
        self._clear_s_known = True
        kill_wait = None
        try:
            res = self.commands.run("config", ["scontrol", "show", "config"], retry_timeouts=True)
            kill_wait = kill_wait_seconds(res.stdout) if res.ok else None
        except SlurmUnreachable:
            pass
        self.old_runs.clear_s = (DEFAULT_KILL_WAIT_S if kill_wait is None else kill_wait) + MARGIN_S

    def private_data(self) -> str | None:
        """Slurm's PrivateData ("none", "jobs,usage"), or None when it cannot be read:
        what `status_privacy: auto` follows (status_private.py)."""
        return read_private_data(self.commands)

    def give_back(self, reasons: Mapping[JobId, str]) -> dict[JobId, str]:
        """Release held jobs the daemon cannot use to Slurm's own scheduling, the reason
        in their comment (slurm/giveback.py); returns those that failed, with why."""
        if self.view is None or not reasons:
            return {}
        scales = {o.job.id: o.job.scale_factor for o in self.view.snapshot.jobs}
        orders = give_back_orders(dict(reasons), self._jobs_seen, scales)
        failed: dict[JobId, str] = {}
        if orders:
            self._relabel(orders, failed)
            relabelled = [o.job_id for o in orders if o.job_id not in failed]
            if relabelled:
                self._release(relabelled, failed)
        return failed

    def set_admin_comments(self, texts: Mapping[JobId, str]) -> dict[JobId, str]:
        """Each job's AdminComment to the daemon's reason (slurm/admin_comment.py);
        returns those that failed, with why."""
        failed: dict[JobId, str] = {}
        for order in comment_orders(texts):
            self._admin_comment(order, failed)
        return failed

    # --- primitives (SlurmRestCluster overrides these) ----------------------------------

    def _admin_comment(self, order: CommentOrder, failed: dict[JobId, str]) -> None:
        note_errors(self.commands.run("admin_comment", order.argv()), list(order.job_ids), failed)

    def _relabel(self, orders: list[GiveBack], failed: dict[JobId, str]) -> None:
        for o in orders:  # one command each: rare (a job is given back once)
            note_errors(self.commands.run("give_back", o.argv()), [o.job_id], failed)

    def _hold(self, ids: list[JobId], failed: dict[JobId, str]) -> None:
        res = self.commands.run("hold", ["scontrol", "hold", job_list(ids)])
        note_errors(res, ids, failed)

    def _requeuehold(self, ids: list[JobId], failed: dict[JobId, str]) -> None:
        res = self.commands.run("requeuehold", requeuehold_argv(ids))
        note_errors(res, ids, failed)

    def _send_signal(self, ids: list[JobId], failed: dict[JobId, str]) -> set[JobId]:
        """Deliver the checkpoint signal; returns the jobs it could not reach."""
        res = self.commands.run(
            "signal", ["scancel", f"--signal={self.checkpoint_signal}", "--batch", *ids]
        )
        return note_errors(res, ids, failed)

    def _start(self, orders: list[StartOrder], failed: dict[JobId, str]) -> list[JobId]:
        """Place, then release only the jobs whose update fully succeeded (a failed
        update may be half applied, and a released job would start anywhere)."""
        if not orders:
            return []
        self._place(orders, failed)
        placed = [o.job_id for o in orders if o.job_id not in failed]
        if not placed:
            return []
        self._wait_out_requeue_second(placed)
        self._release(placed, failed)
        return [j for j in placed if j not in failed]

    def _place(self, orders: list[StartOrder], failed: dict[JobId, str]) -> None:
        """One scontrol reading an update line per job; from PLACE_SPLIT_AT jobs on,
        two side by side, each with half the lines. slurmctld serves each update
        (~2 ms of its CPU with the NodeList) while the other scontrol's next request
        is on its way: 256 updates on 24.11 took 0.85-1.0 s in two streams against
        1.26-1.31 s in one (beside the signal; benchmarks/README.md)."""
        streams = [orders[i::2] for i in range(2)] if len(orders) >= PLACE_SPLIT_AT else [orders]
        results: list[dict[JobId, str]] = [{} for _ in streams]

        def place(part: list[StartOrder], part_failed: dict[JobId, str]) -> None:
            lines = "".join(render_update(o) + "\n" for o in part)
            res = self.commands.run("place", ["scontrol"], stdin=lines)
            note_errors(res, [o.job_id for o in part], part_failed, check_rc=False)

        if len(streams) == 1:
            place(orders, failed)
            return
        with ThreadPoolExecutor(len(streams), thread_name_prefix="gavel-place") as pool:
            list(pool.map(place, streams, results))
        for part_failed in results:
            failed.update(part_failed)

    def _release(self, ids: list[JobId], failed: dict[JobId, str]) -> None:
        res = self.commands.run("release", ["scontrol", "release", job_list(ids)])
        note_errors(res, ids, failed, ignore=("not held", "already"))

    def _states(self, ids: list[JobId]) -> dict[JobId, str]:
        """State names of these jobs (finished jobs may be absent)."""
        res = self.commands.run(
            "wait", ["squeue", "-h", "-j", job_list(ids), "-o", "%i %T"], retry_timeouts=True
        )
        out = {}
        for line in res.stdout.splitlines():
            parts = line.split()
            if len(parts) == 2:
                out[parts[0]] = parts[1]
        return out

    @property
    def commands_issued(self) -> int:
        return self.commands.total


__all__ = ["ActPlan", "SlurmCluster"]
