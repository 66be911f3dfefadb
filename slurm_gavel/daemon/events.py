"""What the daemon logs about each round: one `round` line, and each problem once.

A problem that lasts (a job the table cannot serve, a malformed comment Slurm keeps
listing, a cell no job measured, slurmctld refusing the daemon's account) is logged
once while it lasts, not every round; what is remembered for that is bounded by what
Slurm lists now, since users choose how many jobs there are.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Mapping

from slurm_gavel.core.cluster_rows import TYPE_BLIND
from slurm_gavel.core.round_report import RoundReport
from slurm_gavel.daemon.logs import event, log_ids, running_as
from slurm_gavel.domain.cluster_model import SETTLING, ClusterSnapshot, JobState, NodeState

log = logging.getLogger("slurm_gavel.daemon")

# How slurmctld refuses an action on another user's job to a non-operator: scontrol
# says "Invalid user id" (update, release, hold), scancel "Access/permission denied".
_DENIED = re.compile(r"Invalid user id|Access/permission denied|Permission denied", re.I)


# What the daemon does about the managed jobs of a node in each state (event node_state).
NODE_NEWS = {
    NodeState.UP: "in service: takes new work",
    NodeState.NOT_RESPONDING: "slurmd does not answer: the jobs there keep running and keep "
    "their place and time accounting (not preempted: the checkpoint signal cannot reach "
    "them); nothing new is placed there; if Slurm declares the node DOWN it requeues them "
    "and the daemon places them again",
    NodeState.DOWN: "Slurm declared the node DOWN: it requeues (or ends) the jobs that ran "
    "there; the daemon places them again once their old run is provably gone",
    NodeState.DRAINED: "drained: its managed jobs are checkpointed and placed elsewhere; "
    "nothing new is placed there",
    NodeState.FAILING: "marked FAIL: its managed jobs are checkpointed and placed elsewhere; "
    "nothing new is placed there",
    NodeState.REBOOTING: "reboot requested or under way: its managed jobs are checkpointed "
    "and placed elsewhere; nothing new is placed there",
    NodeState.POWERED_DOWN: "powered down (power saving): nothing is placed there",
}


class RoundEvents:
    """The daemon's log of its rounds, with the memory that makes problems log once."""

    def __init__(self) -> None:
        self.skipped: set[tuple[str, str]] = set()
        self.unmeasured: set[tuple[str, int, str, str]] = set()
        self.done: set[str] = set()
        self.warned: set[str] = set()
        self.denied = False
        self.node_states: dict[str, NodeState] = {}
        self.bounded: dict[str, tuple[str, float, float | None]] = {}

    def rows_bounded(self, clamped: Mapping[str, tuple[str, float, float | None]]) -> None:
        """Log each job's progress report the trust bounds clamped (core/learned_rows/row_trust.py),
        once per job and GPU type and figure reported (the figure used moves as the job's
        progress grows: not news); forget jobs no longer listed there."""
        for job_id, what in clamped.items():
            last = self.bounded.get(job_id)
            if last is not None and last[:2] == what[:2]:
                continue
            self.bounded[job_id] = what
            gpu, reported, used = what
            event(
                log,
                "job_row_bounded",
                logging.WARNING,
                job=job_id,
                gpu_type=gpu,
                reported_steps_per_s=reported,
                used_steps_per_s=used,
                why="beyond the bounds on a job's own row (its progress, learning: "
                "ratio_factor, step_factor; admin guide section 5a)",
            )
        self.bounded = {j: v for j, v in self.bounded.items() if j in clamped}

    def record(
        self,
        report: RoundReport,
        snap: ClusterSnapshot | None,
        backend_warnings: Iterable[str],
        *,
        duration: float,
        commands: int | None,
        dry_run: bool,
    ) -> None:
        r = report.result
        if snap is not None:
            self.record_nodes(snap)
        for job_id, skip in report.skipped:
            if (job_id, skip.detail) not in self.skipped:
                self.skipped.add((job_id, skip.detail))
                event(log, "job_skipped", logging.WARNING, job=job_id, reason=skip.detail,
                      code=skip.code.value)  # fmt: skip
        # Forget jobs Slurm no longer lists: the set stays as small as the queue (it grew
        # with every skipped job ever seen, and users choose how many that is).
        if snap is not None and self.skipped:
            listed = {o.job.id for o in snap.jobs}
            self.skipped = {k for k in self.skipped if k[0] in listed}
        # Cells of the cluster's GPU types no job measured (cluster_rows.py): once per cell
        # and mark (type-blind until some job reports from that GPU type at that scale
        # factor, then an estimate until a job of this very kind reports from it).
        for jt, sf, gpu, mark in report.unmeasured:
            if (jt, sf, gpu, mark) not in self.unmeasured:
                self.unmeasured.add((jt, sf, gpu, mark))
                level = logging.WARNING if mark == TYPE_BLIND else logging.INFO
                event(
                    log,
                    "throughput_unmeasured",
                    level,
                    job_type=jt,
                    scale_factor=sf,
                    gpu_type=gpu,
                    mark=mark,
                )
        # What the backend found wrong in Slurm's data (a malformed gavel comment, GPUs
        # without a type, a job gone unseen): once each while it lasts, not every round.
        warnings = set(backend_warnings)
        for text in sorted(warnings - self.warned):
            event(log, "slurm_warning", logging.WARNING, warning=text)
        self.warned = warnings
        # Slurm lists a finished job for MinJobAge seconds: log it once, not every round.
        done = {o.job.id for o in report.completed}
        for o in report.completed:
            if o.job.id not in self.done:
                event(log, "job_done", job=o.job.id, succeeded=o.succeeded, restarts=o.restarts)
        self.done = done
        event(
            log,
            "round",
            round=report.round_index,
            duration_s=round(duration, 4),
            solve_s=round(report.solve_seconds, 4),
            reallocated=report.reallocated,
            active=report.active_jobs,
            started=len(r.started),
            kept=len(r.kept),
            preempted=len(r.preempted),
            moved=len(r.moved),
            failed=len(r.failed),
            slurm_commands=commands,
            dry_run=dry_run,
            started_jobs=log_ids(r.started),
            preempted_jobs=log_ids(r.preempted + r.moved),
        )
        # (a settling round "fails" every placement on purpose: its own event says so)
        for job_id, why in [f for f in r.failed if f[1] != SETTLING][:50]:
            event(log, "action_failed", logging.WARNING, job=job_id, reason=why)
        self.say_if_not_an_operator([j for j, why in r.failed if _DENIED.search(why)])

    def record_nodes(self, snap: ClusterSnapshot) -> None:
        """A `node_state` line when a node changes state (and for a node first seen not
        up): what Slurm says and what the daemon does about the managed jobs there."""
        for n in snap.nodes:
            was = self.node_states.get(n.name)
            self.node_states[n.name] = n.state
            if n.state is was or (was is None and n.state is NodeState.UP):
                continue
            jobs = tuple(
                o.job.id
                for o in snap.jobs
                if o.state is JobState.RUNNING and any(s.node == n.name for s in o.nodes)
            )
            event(
                log,
                "node_state",
                logging.INFO if n.state is NodeState.UP else logging.WARNING,
                node=n.name,
                state=n.state.value,
                was=None if was is None else was.value,
                jobs=log_ids(jobs),
                what=NODE_NEWS[n.state],
            )

    def say_if_not_an_operator(self, denied: list[str]) -> None:
        """slurmctld refused to act on other users' jobs: the daemon's account lacks
        Slurm operator rights. Said once, at error level, with the fix."""
        if not denied or self.denied:
            return
        self.denied = True
        user = running_as()
        event(
            log,
            "not_a_slurm_operator",
            logging.ERROR,
            user=user,
            jobs=log_ids(tuple(denied)),
            fix=f"slurmctld refused to act on other users' jobs as {user}: make it an "
            f"operator (sacctmgr -i add user {user} account=root adminlevel=Operator) or run "
            "the daemon as SlurmUser (docs/admin-guide.md, Security)",
        )
