"""SlurmCluster: the round loop's backend for a real Slurm, through its commands.

observe, in the JSON format of the release (detected once, slurm_release.detect_cli:
`sinfo -V` + `squeue --json=list`), two or three commands per round:

    nodes        scontrol --json=vX show nodes   (22.05: sinfo --json)
    list         squeue -h -t <waiting and running states> -O <fields>: every job's
                 fields as text, to tell which changed (slurm_job_listing.py)
    jobs         squeue --json=vX -t all -j ID,...  only the new or changed jobs
                 (24.11+); every waiting and running job in the first round, every
                 10th, and on 22.05 (whose --json ignores -j and -t) in any round in
                 which the listing changed; none when nothing changed
    ended        squeue --json=vX -t all -j ID,...  only in a round where a managed
                 job left that list (how it ended: completed or failed)

so the JSON read per round follows the jobs that changed, and does not grow with
finished jobs (on 22.05 MinJobAge bounds the full read).
act, one command per action kind, whatever the number of jobs:

    signal       scancel --signal=USR1 --batch ID ID ...   (preempt and move)
    place        scontrol, reading one `update JobId=...` line per job on stdin
    release      scontrol release ID,ID,...
    hold         scontrol hold ID,ID,...   (released earlier, not placed this round)
    wait         squeue -h -j ID,... -o "%i %T"  (polled during the grace, only when a
                 move or a pair's start needs a signalled job gone)
    requeuehold  scontrol requeuehold ID,...  (did not exit 99 within the grace: in the
                 act that waited, else in the next act)
    give_back    scontrol update JobId=ID "Comment=gavel-released: <why>", per held job
                 the daemon cannot use, then release (slurm_giveback.py)

Managed jobs are never cancelled; jobs whose comment does not claim them for
slurm-gavel are never named in a command.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable, Collection, Mapping

from slurm_gavel.backends.retry import attempts
from slurm_gavel.backends.slurm_admin_comment import CommentOrder, comment_orders
from slurm_gavel.backends.slurm_commands import (
    CommandResult,
    SlurmCommands,
    SlurmUnreachable,
    errors_by_job,
)
from slurm_gavel.backends.slurm_giveback import GiveBack, give_back_orders, refused_held
from slurm_gavel.backends.slurm_grace import job_grace
from slurm_gavel.backends.slurm_job_cache import JobRecordCache
from slurm_gavel.backends.slurm_job_listing import (
    IncrementalJobs,
    Record,
    listing_argv,
    new_token,
    parse_listing,
)
from slurm_gavel.backends.slurm_json import (
    SlurmJob,
    SlurmJsonError,
    SlurmNode,
    parse_jobs,
    parse_nodes,
)
from slurm_gavel.backends.slurm_old_runs import (
    DEFAULT_KILL_WAIT_S,
    MARGIN_S,
    UNREACHABLE,
    OldRuns,
    kill_wait_seconds,
)
from slurm_gavel.backends.slurm_pairs import AfterExit, StartOrder
from slurm_gavel.backends.slurm_private_data import read_private_data
from slurm_gavel.backends.slurm_release import CliFormat, detect_cli
from slurm_gavel.backends.slurm_snapshot import (
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


class SlurmCluster:
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
    ) -> None:
        """managed_partitions: None manages every partition. env: e.g. SLURM_CONF.
        grace_s: a job's grace when its comment asks none (grace=); max_grace_s caps an
        ask (None: grace_s).
        wait_for_preempted: when a move or a pair's start needs a signalled job gone,
        act() waits for it, up to its own grace, then starts them (False: never waits;
        such starts happen in a later act()). Other signalled jobs are never waited
        for: a later act() requeue-holds those still running after their grace.
        data_parser: e.g. "v0.0.45", the JSON format to ask the CLI for, skipping the
        check that Slurm is a release slurm-gavel knows (default: the environment's
        SLURM_GAVEL_DATA_PARSER, else detected)."""
        self.managed_partitions = None if managed_partitions is None else set(managed_partitions)
        self.commands = commands or SlurmCommands(env)
        self.grace_s = grace_s
        self.max_grace_s = max_grace_s
        self._grace_capped_told: set[JobId] = set()  # logged once per job
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
        self._requeued_at: dict[JobId, float] = {}  # seen leaving its run in this act (clock)
        # the orders the last act released (job -> order): still pending, not re-issued
        self._released: dict[JobId, StartOrder] = {}
        self.data_parser = data_parser or os.environ.get("SLURM_GAVEL_DATA_PARSER") or None
        self._format: CliFormat | None = None  # detected on the first observe
        # Requeued jobs whose previous run may still be on a node (slurm_old_runs.py);
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
        jobs = self._fetch_jobs()
        listed = {j.job_id for j in jobs}
        ended = [j for j in self._active if j not in listed]
        if ended:
            jobs += self._ended_jobs(ended)
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

    @property
    def cli_format(self) -> CliFormat:
        """This Slurm's release and JSON commands, detected once (2 commands)."""
        if self._format is None:
            self._format = detect_cli(self.commands, self.data_parser)
            self._allow_newer = self._format.allow_newer
        return self._format

    def _fetch_nodes(self) -> dict:
        return self._json("observe", self.cli_format.nodes_argv())

    def _fetch_jobs(self) -> list[SlurmJob]:
        """The waiting and running jobs: JSON only for those new or changed since the
        last observe (slurm_job_listing.py). The first observe reads every job, the
        finished ones too (-t all, once): jobs that ended while the daemon was down
        are then reported done, as 22.05 always did."""
        fmt = self.cli_format
        first = self.view is None

        def full() -> list[SlurmJob]:
            doc = self._json("observe", fmt.jobs_argv(finished_too=first))
            return self._job_cache.parse(doc, allow_newer=self._allow_newer)[1]

        def some(ids: list[JobId]) -> list[SlurmJob]:
            return self._jobs_by_id("observe", ids)

        some_or_none = some if fmt.filters_work else None
        return self._listed.read(self._listing(), full, some_or_none, force_full=first)

    def _listing(self) -> dict[JobId, Record] | None:
        """Every waiting or running job's listing record; None (read every job's
        JSON instead) when squeue fails or prints something unreadable."""
        token = new_token()
        res = self.commands.run("list", listing_argv(token), retry_timeouts=True)
        listing = parse_listing(res.stdout, token) if res.ok else None
        if listing is None:
            log.warning(
                "squeue's job listing was unreadable (exit %s: %s); every job's JSON read "
                "instead", res.returncode, res.stderr.strip()[:200],
            )  # fmt: skip
        return listing

    def _ended_jobs(self, ids: list[JobId]) -> list[SlurmJob]:
        """The final records of managed jobs that left the waiting/running list since
        the last observe (one command, only in such a round), so that how they ended
        is known. A job slurmctld forgot already is not returned (add_vanished)."""
        fmt = self._format
        if fmt is None or not fmt.filters_work:  # 22.05 listed finished jobs already
            return []
        return self._jobs_by_id("ended", ids)

    def _jobs_by_id(self, kind: str, ids: list[JobId]) -> list[SlurmJob]:
        """These jobs' JSON records, whatever their state (one command; 23.02+)."""
        fmt = self.cli_format
        res = self.commands.run(kind, fmt.ended_jobs_argv(ids), retry_timeouts=True)
        if not res.ok:
            if "invalid job id" in res.stderr.lower():  # every one of them forgotten
                return []
            raise SlurmJsonError(f"{' '.join(res.argv)} failed: {res.stderr.strip()}")
        try:
            _, jobs = parse_jobs(json.loads(res.stdout), allow_newer=self._allow_newer)
        except json.JSONDecodeError as e:
            raise SlurmJsonError(f"{' '.join(res.argv)} printed no JSON ({e})") from None
        wanted = set(ids)
        return [j for j in jobs if j.job_id in wanted]

    def _json(self, kind: str, argv: list[str]) -> dict:
        """Run a --json command. On 22.05, squeue/sinfo --json exit 0 with an empty
        list and an "errors" entry ("Failed while looking for jobs") when slurmctld
        is unreachable, and say nothing on stderr: such a document is retried like
        an unreachable controller, never read as "no jobs"."""
        c = self.commands
        for _ in attempts(c.retries, c.backoff, c.sleep):
            res = c.run(kind, argv, retry_timeouts=True)
            if not res.ok:
                raise SlurmJsonError(f"{' '.join(argv)} failed: {res.stderr.strip()}")
            try:
                doc = json.loads(res.stdout)
            except json.JSONDecodeError as e:
                raise SlurmJsonError(
                    f"{' '.join(argv)} printed no JSON ({e}); Slurm >= 22.05 is needed for --json"
                ) from None
            errors = doc.get("errors") if isinstance(doc, dict) else None
            if not errors:
                return doc
        assert errors  # the loop returned every document without errors
        raise SlurmUnreachable(
            f"{' '.join(argv)} reported {errors[0]} after {self.commands.retries + 1} tries; "
            "is slurmctld running and SLURM_CONF right?"
        )

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
        signalled = self._signal(self._signallable(plan.to_signal, told, failed), failed)
        signalled += [j for j in plan.to_signal if j in told and j not in failed]
        if plan.hold:
            self._hold(plan.hold, failed)
        started = self._start(plan.starts, failed)
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

    def _old_runs_gone(
        self, orders: list[StartOrder], failed: dict[JobId, str]
    ) -> list[StartOrder]:
        """The start orders of jobs whose previous run is provably gone from every node
        it ran on; the others wait, with the reason (slurm_old_runs.py)."""
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
        in their comment (slurm_giveback.py); returns those that failed, with why."""
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
        """Each job's AdminComment to the daemon's reason (slurm_admin_comment.py);
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
        res = self.commands.run("requeuehold", ["scontrol", "requeuehold", job_list(ids)])
        note_errors(res, ids, failed)

    def _send_signal(self, ids: list[JobId], failed: dict[JobId, str]) -> set[JobId]:
        """Deliver the checkpoint signal; returns the jobs it could not reach."""
        res = self.commands.run(
            "signal", ["scancel", f"--signal={self.checkpoint_signal}", "--batch", *ids]
        )
        return note_errors(res, ids, failed)

    def _signal(self, ids: list[JobId], failed: dict[JobId, str]) -> list[JobId]:
        if not ids:
            return []
        bad = self._send_signal(ids, failed)
        now = self.clock()
        ok = [j for j in ids if j not in bad]
        for j in ok:
            self._signalled[j] = now + self._grace_of(j)
            self._signal_sent[j] = now
        return ok

    def _grace_of(self, j: JobId) -> float:
        sj = self.view.managed.get(j) if self.view is not None else None
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
        lines = "".join(render_update(o) + "\n" for o in orders)
        res = self.commands.run("place", ["scontrol"], stdin=lines)
        note_errors(res, [o.job_id for o in orders], failed, check_rc=False)

    def _release(self, ids: list[JobId], failed: dict[JobId, str]) -> None:
        res = self.commands.run("release", ["scontrol", "release", job_list(ids)])
        note_errors(res, ids, failed, ignore=("not held", "already"))

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
            sj = self.view.managed.get(j) if self.view is not None else None
            if sj is not None and sj.restarts > 0:
                latest = max(latest, float(sj.submit_time))
            latest = max(latest, float(int(self._requeued_at.pop(j, 0.0))))
        wait = latest + 1.05 - self.clock()
        if latest and wait > 0:
            time.sleep(min(wait, 1.1))

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
        stuck = [j for j in due if self._states([j]).get(j) == "RUNNING"]
        if stuck:
            # the nodes now, not as the round's observe saw them
            _, nodes = parse_nodes(self._fetch_nodes(), allow_newer=self._allow_newer)
            reached = self._signal_reached(stuck, {n.name: n for n in nodes}, failed)
            due = [j for j in due if j in reached or j not in stuck]  # not requeued
            stuck = reached
        if stuck:
            self._requeuehold(stuck, failed)
        return due

    def _signallable(
        self, ids: list[JobId], told: set[JobId], failed: dict[JobId, str]
    ) -> list[JobId]:
        """Jobs to signal now: strictly RUNNING ones not already told. A job that is
        CONFIGURING or COMPLETING cannot take a signal, and scancel would retry it
        by itself for minutes ("Job can not be altered now"), stalling the batch."""
        assert self.view is not None
        out = []
        for j in ids:
            if j in told:
                continue
            state = self.view.managed[j].state
            if state == "RUNNING":
                out.append(j)
            else:
                failed[j] = (
                    f"job is {state}, cannot take the checkpoint signal now; retried next round"
                )
        return out

    def _requeuehold_overdue(self, failed: dict[JobId, str]) -> set[JobId]:
        """Requeue-hold the jobs an earlier act signalled (and did not wait for) that
        still run after their grace."""
        if not self._signalled or self.view is None:
            return set()
        now = self.clock()
        seen = self.view.snapshot.time
        running = {j.job.id for j in self.view.snapshot.jobs if j.state is JobState.RUNNING}
        overdue = [j for j, t in self._signalled.items() if t <= now and j in running]
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
            sj = self.view.managed.get(j) if self.view is not None else None
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

    @property
    def commands_issued(self) -> int:
        return self.commands.total


def note_errors(
    res: CommandResult,
    ids: list[JobId],
    failed: dict[JobId, str],
    *,
    check_rc: bool = True,
    ignore: tuple[str, ...] = (),
) -> set[JobId]:
    """Record per-job errors of a batched command; an unattributable error fails all."""
    per_job, other = errors_by_job(res.stderr)
    bad: set[JobId] = set()
    for j in ids:
        msg = per_job.get(j)
        if msg and not any(s in msg.lower() for s in ignore):
            failed[j] = msg
            bad.add(j)
    other = [o for o in other if not any(s in o.lower() for s in ignore)]
    if (other or (check_rc and not res.ok and not per_job)) and not bad:
        reason = "; ".join(other) or f"{res.argv[0]} exited {res.returncode}"
        for j in ids:
            failed.setdefault(j, reason)
            bad.add(j)
    return bad


__all__ = ["ActPlan", "SlurmCluster"]
