"""The daemon's watch on how managed jobs' runs end: crash loops bounded, jobs that
never checkpoint warned then given back, jobs the checkpoint signal killed told why.

The backend reports each observe's ended runs by kind (core/run_ends.py; the Slurm
backend: backends/slurm/ended_runs.py); this decides, per job, from streaks in a row:

- UNSIGNALLED runs shorter than ``checkpoint.short_run_seconds`` (or never seen
  running) ``checkpoint.max_unsignalled_restarts`` times in a row: a crash loop (a job
  that exits with the requeue code at every start, or that Slurm cannot launch). Every
  release would start it again, forever. It is given back to Slurm (the daemon's give
  back, backends/slurm/giveback.py: its comment says why; the daemon never cancels a
  managed job), where Slurm's own RequeueExitHold holds it after its next exit 99.
  A longer unsignalled run (its own time-limit checkpoint) or a checkpoint at the
  daemon's signal ends the streak.
- IGNORED_SIGNAL (requeue-held at its grace end: its work since its last checkpoint
  is lost each time): a warning to its owner (AdminComment, `explain`) at each, and
  after ``checkpoint.max_ignored_signals`` in a row it is given back to Slurm, which
  runs it to its end, not preempted. A CHECKPOINTED run ends the streak.
- A restart that resumed from no later step than the run before it, after that run
  went further (its progress reports of each run, daemon/progress_learning.py: ``steps`` less
  ``run_steps`` is where a run resumed): its checkpoints keep nothing (it exits 99 at
  the signal without saving, or saves where it never loads). A warning only, however
  many: the reports are the user's, and a given-back job is no longer preempted,
  which a job must not buy with a false report. A run that resumed further on ends the streak.
- KILLED_BY_SIGNAL: the job ended for good at the signal (a script with no handler:
  FAILED 0:10, empty output): a notice for its owner in `explain`; Slurm refuses an
  AdminComment on a finished job.

Each decision is logged once and counted (slurm_gavel_run_ends_total,
slurm_gavel_jobs_given_back_total). The notices (job -> the daemon's sentence) go to
the state document and the status view, where `explain` finds them once the job has
left the daemon's jobs. The crash-loop and ignored-signal streaks and the give backs
still to do are saved with the state too (``streaks_json``, key ``run_watch``): a
restarted daemon goes on counting where it stopped, so a restart never grants a
looping job its count of fresh starts again (a run that ended while the daemon was
down is not counted: the backend reports only ends it saw happen, so a restart costs
a loop one more start at most). A state file without them (an older
daemon's) loads with no streaks; values not in the shape written here are dropped.
The progress streaks (a warning only) are not saved.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from slurm_gavel.core.run_ends import RunEnd, RunEndKind
from slurm_gavel.daemon.config_types import CheckpointConfig
from slurm_gavel.daemon.logs import event
from slurm_gavel.domain.cluster_model import ClusterSnapshot, JobState
from slurm_gavel.domain.model import JobId

log = logging.getLogger("slurm_gavel.daemon")

MAX_NOTICES = 1000  # the newest are kept: the view stays small
NOTICE_KEEP_S = 7 * 86400.0
MAX_NOTICE_CHARS = 400
# Saved streaks read back: a count above the largest limit the config allows (1000)
# decides as that limit does; job ids as Slurm writes them ("123", "45_6") are short.
MAX_SAVED_COUNT = 1_000_000
MAX_SAVED_JOBS = 100_000
MAX_JOB_ID_CHARS = 64
GIVE_BACK_LABELS = ("crash_loop", "ignored_signal")


@dataclass(frozen=True)
class Notice:
    """What the daemon tells a job's owner about how its runs ended."""

    text: str
    time: float
    user: str | None = None
    user_id: int | None = None
    # "given back", "ended" (finished: no AdminComment can be written) or "warned"
    # (still managed: the text goes after the round's reason)
    kind: str = "warned"

    def to_json(self) -> dict[str, Any]:
        return {"text": self.text, "time": self.time, "user": self.user,
                "user_id": self.user_id, "kind": self.kind}  # fmt: skip


KINDS = ("given back", "ended", "warned")


def notices_from_json(raw: Any) -> dict[JobId, Notice]:
    """Notices saved with the state; anything not in the shape this module writes is
    dropped (the state is the daemon's own, but a bad file must not stop it)."""
    out: dict[JobId, Notice] = {}
    if not isinstance(raw, Mapping):
        return out
    for job_id, v in raw.items():
        if not isinstance(job_id, str) or not isinstance(v, Mapping):
            continue
        text, t, kind = v.get("text"), v.get("time"), v.get("kind")
        uid, user = v.get("user_id"), v.get("user")
        if not isinstance(text, str) or kind not in KINDS:
            continue
        if isinstance(t, bool) or not isinstance(t, int | float) or not math.isfinite(t):
            continue
        out[job_id] = Notice(
            text[:MAX_NOTICE_CHARS],
            float(t),
            user if isinstance(user, str) else None,
            uid if isinstance(uid, int) and not isinstance(uid, bool) else None,
            kind,
        )
    return out


def _saved_job_id(job_id: Any) -> bool:
    return isinstance(job_id, str) and 0 < len(job_id) <= MAX_JOB_ID_CHARS


def _counts_from_json(raw: Any) -> dict[JobId, int]:
    """job -> a streak of 1 or more; entries of any other shape dropped."""
    out: dict[JobId, int] = {}
    if not isinstance(raw, Mapping):
        return out
    for job_id, n in list(raw.items())[:MAX_SAVED_JOBS]:
        if not _saved_job_id(job_id) or isinstance(n, bool) or not isinstance(n, int):
            continue
        if n >= 1:
            out[job_id] = min(n, MAX_SAVED_COUNT)
    return out


@dataclass
class RunWatch:
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    unsignalled: dict[JobId, int] = field(default_factory=dict)  # short runs in a row
    ignored: dict[JobId, int] = field(default_factory=dict)  # grace ends in a row
    # job -> why, until the give back succeeded (the round does not place it meanwhile)
    to_give_back: dict[JobId, str] = field(default_factory=dict)
    # Of those, the ones waiting at the last observe: only a waiting job can be given
    # back (a running one is when it next waits)
    ready: set[JobId] = field(default_factory=set)
    give_back_why: dict[JobId, str] = field(default_factory=dict)  # metric label
    notices: dict[JobId, Notice] = field(default_factory=dict)
    # From progress reports, per job: the step its current run resumed from and the
    # most steps it reported, the previous run's, and restarts in a row that kept no
    # progress.
    run_resumed: dict[JobId, float] = field(default_factory=dict)
    run_high: dict[JobId, float] = field(default_factory=dict)
    last_run: dict[JobId, tuple[float, float]] = field(default_factory=dict)
    no_progress: dict[JobId, int] = field(default_factory=dict)
    _flagged: set[JobId] = field(default_factory=set)  # this run counted already
    # (kind) -> count this round, for the metrics
    counted: list[RunEnd] = field(default_factory=list)

    # ---- each observe -----------------------------------------------------------------

    def observe(
        self,
        ends: list[RunEnd],
        snap: ClusterSnapshot,
        runs: Mapping[JobId, tuple[float, float]] | None = None,
    ) -> ClusterSnapshot:
        """Count the observe's ended runs and the reports of the jobs' current runs
        (runs: job -> (steps, the step the run resumed from), ProgressTracker.current_runs);
        returns the snapshot less the waiting jobs to give back (no round places them
        again: they leave the daemon's jobs)."""
        jobs = {o.job.id: o for o in snap.jobs}
        self.counted = list(ends)
        for e in ends:
            o = jobs.get(e.job_id)
            if o is None:
                continue
            user, uid = o.job.user, o.user_id
            self._run_ended(e.job_id)
            if e.kind is RunEndKind.CHECKPOINTED:
                self._clear(e.job_id)
            elif e.kind is RunEndKind.UNSIGNALLED:
                self._unsignalled(e, user, uid, snap.time)
            elif e.kind is RunEndKind.IGNORED_SIGNAL:
                self._ignored(e, user, uid, snap.time)
            elif e.kind is RunEndKind.KILLED_BY_SIGNAL:
                self._killed(e, user, uid, snap.time)
        for job_id, (steps, resumed) in (runs or {}).items():
            o = jobs.get(job_id)
            if o is not None and o.state is JobState.RUNNING:
                self._steps(job_id, steps, resumed, o.job.user, o.user_id, snap.time)
        active = {j for j, o in jobs.items() if o.state is not JobState.DONE}
        tables: list[Any] = [self.unsignalled, self.ignored, self.run_resumed, self.run_high,
                             self.last_run, self.no_progress]  # fmt: skip
        for table in tables:
            for gone in [j for j in table if j not in active]:
                del table[gone]
        self._flagged &= active
        for gone in [j for j in self.to_give_back if j not in active]:
            del self.to_give_back[gone]  # given back (no longer managed) or ended
        self._prune(snap.time)
        waiting = (JobState.PENDING, JobState.HELD)
        self.ready = {j for j in self.to_give_back if jobs[j].state in waiting}
        if not self.ready:
            return snap
        kept = tuple(o for o in snap.jobs if o.job.id not in self.ready)
        return ClusterSnapshot(snap.time, snap.nodes, kept)

    def _run_ended(self, job_id: JobId) -> None:
        """A run ended: where it resumed and the most steps it reported become the last
        run's; one that resumed further on than the run before ends the streak."""
        resumed, high = self.run_resumed.pop(job_id, None), self.run_high.pop(job_id, None)
        self._flagged.discard(job_id)
        if resumed is None or high is None:
            return
        last = self.last_run.get(job_id)
        if last is not None and resumed > last[0] and job_id in self.no_progress:
            del self.no_progress[job_id]
            self._drop_warning(job_id)
        self.last_run[job_id] = (resumed, high)

    def _steps(
        self,
        job_id: JobId,
        steps: float,
        resumed: float,
        user: str | None,
        uid: int | None,
        now: float,
    ) -> None:
        """A report of a running job's current run: where the run resumed (steps less
        the run's own steps) and the most steps of the run; flags, once per run, a run
        that resumed from no later step than the run before did, after that run went
        further: its checkpoint kept nothing of that run."""
        self.run_resumed[job_id] = resumed
        self.run_high[job_id] = max(steps, self.run_high.get(job_id, steps))
        last = self.last_run.get(job_id)
        if last is None or job_id in self._flagged:
            return
        last_resumed, last_high = last
        if resumed > last_resumed or last_high <= last_resumed:
            return
        self._flagged.add(job_id)
        n = self.no_progress[job_id] = self.no_progress.get(job_id, 0) + 1
        sig = "SIG" + self.checkpoint.signal
        self.notices[job_id] = Notice(
            f"warning: its last {n} restart{'s' if n != 1 else ''} kept no progress (this "
            f"run resumed from step {resumed:.0f}, the run before from {last_resumed:.0f} "
            f"and reached {last_high:.0f}): its checkpoints keep nothing. Save one on {sig} "
            "and load it at the start (the job library does; user guide)",
            now, user, uid, "warned",
        )  # fmt: skip
        event(log, "restart_without_progress", logging.WARNING, job=job_id, in_a_row=n,
              resumed_at=resumed, before=last_resumed, reached=last_high)  # fmt: skip

    def _clear(self, job_id: JobId) -> None:
        self.unsignalled.pop(job_id, None)
        self.ignored.pop(job_id, None)
        self._drop_warning(job_id)

    def _drop_warning(self, job_id: JobId) -> None:
        """Its warning, once nothing it warned of lasts."""
        n = self.notices.get(job_id)
        if n is None or n.kind != "warned":
            return
        if not (self.unsignalled.get(job_id) or self.ignored.get(job_id)) and (
            job_id not in self.no_progress
        ):
            del self.notices[job_id]

    def _unsignalled(self, e: RunEnd, user: str | None, uid: int | None, now: float) -> None:
        self.ignored.pop(e.job_id, None)
        short_s = self.checkpoint.short_run_seconds
        if e.ran_s is not None and e.ran_s >= short_s:
            if self.unsignalled.pop(e.job_id, None):  # a long run: its own checkpoint
                self._drop_warning(e.job_id)
            return
        n = self.unsignalled[e.job_id] = self.unsignalled.get(e.job_id, 0) + 1
        limit = self.checkpoint.max_unsignalled_restarts
        if e.job_id in self.to_give_back:
            return
        if n < limit:  # told before it happens: `explain` would say "running" meanwhile
            self.notices[e.job_id] = Notice(
                f"warning: its last {n} run{'s' if n != 1 else ''} ended without the "
                f"checkpoint signal within {short_s:g} s of its start (last: {e.detail}); "
                f"at {limit} in a row it is given back to Slurm as a crash loop",
                now, user, uid, "warned",
            )  # fmt: skip
            return
        why = (
            f"crash loop: its last {n} runs ended without the checkpoint signal, each "
            f"within {short_s:g} s of its start (last: {e.detail}); every release would "
            "start it again: check its output"
        )
        self._give_back(e.job_id, why, "crash_loop", user, uid, now)
        event(log, "crash_loop", logging.WARNING, job=e.job_id, runs=n, last=e.detail,
              short_run_s=short_s)  # fmt: skip

    def _ignored(self, e: RunEnd, user: str | None, uid: int | None, now: float) -> None:
        self.unsignalled.pop(e.job_id, None)  # its warning, if any, is replaced below
        n = self.ignored[e.job_id] = self.ignored.get(e.job_id, 0) + 1
        limit = self.checkpoint.max_ignored_signals
        sig = "SIG" + self.checkpoint.signal
        lost = (
            f"it ignored the checkpoint signal ({sig}) {n} time{'s' if n != 1 else ''} in a "
            "row: requeue-held after its grace, its work since its last checkpoint lost"
        )
        event(log, "checkpoint_signal_ignored", logging.WARNING, job=e.job_id, in_a_row=n,
              limit=limit)  # fmt: skip
        if limit == 0 or n < limit:  # 0: the admin's "warn only"
            then = f". At {limit} it is given back to Slurm, not preempted" if limit else ""
            self.notices[e.job_id] = Notice(
                f"warning: {lost}; checkpoint and exit {self.checkpoint.requeue_exit_code} on "
                f"{sig} (user guide){then}",
                now, user, uid, "warned",
            )  # fmt: skip
            return
        if e.job_id in self.to_give_back:
            return
        why = f"never checkpoints: {lost}; Slurm runs it to its end, not preempted"
        self._give_back(e.job_id, why, "ignored_signal", user, uid, now)

    def _killed(self, e: RunEnd, user: str | None, uid: int | None, now: float) -> None:
        sig = "SIG" + self.checkpoint.signal
        self._clear(e.job_id)
        text = (
            f"ended by the checkpoint signal {sig} ({e.detail}): its script has no handler "
            f"for it, and the signal's default action killed it. Use the job library "
            f"(slurm_gavel.job) or trap {sig} in the script: checkpoint and exit "
            f"{self.checkpoint.requeue_exit_code} (user guide)"
        )
        self.notices[e.job_id] = Notice(text, now, user, uid, "ended")
        event(log, "checkpoint_signal_killed", logging.WARNING, job=e.job_id, how=e.detail)

    def _give_back(
        self, job_id: JobId, why: str, label: str, user: str | None, uid: int | None, now: float
    ) -> None:
        self.to_give_back[job_id] = why
        self.give_back_why[job_id] = label
        self.notices[job_id] = Notice("given back to Slurm: " + why, now, user, uid, "given back")

    def ready_reasons(self) -> dict[JobId, str]:
        """The jobs to give back now (waiting), with why."""
        return {j: why for j, why in self.to_give_back.items() if j in self.ready}

    def given_back(self, job_ids: list[JobId]) -> list[str]:
        """The give back of these jobs succeeded; returns each one's metric label."""
        labels = []
        for j in job_ids:
            self.ready.discard(j)
            if self.to_give_back.pop(j, None) is not None:
                labels.append(self.give_back_why.pop(j, "crash_loop"))
        return labels

    def _prune(self, now: float) -> None:
        old = [j for j, n in self.notices.items() if now - n.time > NOTICE_KEEP_S]
        for j in old:
            del self.notices[j]
        if len(self.notices) > MAX_NOTICES:
            newest = sorted(self.notices.items(), key=lambda kv: kv[1].time)[-MAX_NOTICES:]
            self.notices = dict(newest)

    def notices_json(self) -> dict[str, dict[str, Any]]:
        return {j: n.to_json() for j, n in sorted(self.notices.items())}

    def streaks_json(self) -> dict[str, Any]:
        """The counts a restart must not forget (the state's ``run_watch``)."""
        return {
            "unsignalled": dict(sorted(self.unsignalled.items())),
            "ignored": dict(sorted(self.ignored.items())),
            "to_give_back": {
                j: {"why": why, "label": self.give_back_why.get(j, "crash_loop")}
                for j, why in sorted(self.to_give_back.items())
            },
        }

    def load_streaks(self, raw: Any) -> None:
        """The saved counts (``streaks_json``), checked as the notices are: the state is
        the daemon's own, but a hand-edited or damaged file must neither stop it nor
        hand a job anything; None (an older state file) loads none."""
        raw = raw if isinstance(raw, Mapping) else {}
        self.unsignalled = _counts_from_json(raw.get("unsignalled"))
        self.ignored = _counts_from_json(raw.get("ignored"))
        self.to_give_back, self.give_back_why = {}, {}
        backs = raw.get("to_give_back")
        if not isinstance(backs, Mapping):
            return
        for job_id, v in list(backs.items())[:MAX_SAVED_JOBS]:
            if not _saved_job_id(job_id) or not isinstance(v, Mapping):
                continue
            why, label = v.get("why"), v.get("label")
            if not isinstance(why, str) or not why or label not in GIVE_BACK_LABELS:
                continue
            self.to_give_back[job_id] = why[:MAX_NOTICE_CHARS]
            self.give_back_why[job_id] = label
