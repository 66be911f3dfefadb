"""Progress flowing back: the job-side spool read into the snapshot and the accounting.

Jobs that use slurm_gavel.job write ``<progress_dir>/<uid>/<job id>.json`` (layout in
daemon/spool.py, format in slurm_gavel/job/progress.py). Users write these files, so
everything in them is hostile input. Each round the daemon:

* reads the report of every managed job of a known owner (Slurm's uid) from that
  user's folder: never blocking, only a regular file of that uid, at most 64 KiB;
* refuses the whole report (logged once per job and reason) unless its ``job_id`` is
  the job's, every number is finite and in range, ``updated`` is neither in the
  future nor older than the job's submission (a file left by an earlier job)
  (progress_report.py);
* sets ``steps_done`` (capped at the job's total) and, for the job's current run
  (same restart count, running, recent), ``measured_throughput``: the job's own row's
  cell on that GPU type (core/learned_rows/job_rows.py, bounded by
  core/learned_rows/row_trust.py), also for a job of no known type, which has no table
  cell to vote on;
* keeps each job's latest rate as a vote on its (job type, scale factor, GPU type)
  cell: the job type comes from Slurm's comment and must be a row of the configured
  table (no made-up rows), the GPU type from Slurm's allocation (a type new to the
  table is learned, as cluster_rows.py expects on day one); only within
  ABSURD_FACTOR of the cell's reference (estimate.cell_reference), at most
  MAX_VOTES_PER_USER per user and MAX_VOTES_PER_CELL per cell;
* a job Slurm shows sharing its GPU (ObservedJob.partner: the same GPU index as its
  partner's) votes on its side of the pair cell instead (pair_cells.py), and only when
  its report names that same partner (``partner``: the job library restarts its rate
  window when the partner changes, so the rate is all shared time): a report naming
  another job is refused (last round's partner excepted: a pair just split, its
  steps count); the partner must be a managed job running on the same GPUs with
  this job as its partner, the pair cell one the table has. A report naming none
  (real jobs do not know their partner) has its ``steps_per_s`` ignored (it may mix
  alone and shared time): the daemon derives the paired rate from two of its reports
  inside a window in which it saw the pair together every round (pair_windows.py);
* moves a cell only on agreement (:func:`agreed_value`): users, not jobs, vote (each
  the median of their jobs), the cell heads for the median of QUORUM_USERS or more
  users and never past what a second user also claims, by at most STEP_FACTOR per
  round, and never beyond estimate.MAX_DRIFT of the configured table.

A missing, stale or refused report changes nothing: progress is an optional
refinement, never a condition for scheduling. Jobs without reports get their steps
estimated from the time they received (:func:`estimate_steps`).
"""

from __future__ import annotations

import logging
import math
import os
import statistics
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from slurm_gavel.core import estimate
from slurm_gavel.core.moldable.mold_round import at_running_count
from slurm_gavel.daemon.logs import event
from slurm_gavel.daemon.pair_cells import PairObservation, pair_reference
from slurm_gavel.daemon.pair_windows import Mark, PairWindows, mate_of, pairings
from slurm_gavel.daemon.progress_cells import (
    MAX_VOTES_PER_CELL,
    MAX_VOTES_PER_USER,
    QUORUM_USERS,
    READS,
    Cell,
    Vote,
    agreed_value,
    cell_from_json,
    cells_to_json,
    finite,
)
from slurm_gavel.daemon.progress_report import MAX_STEPS, check_report
from slurm_gavel.daemon.spool import SpoolProblem, open_root, open_user_dir, read_user_report
from slurm_gavel.domain.cluster_model import ClusterSnapshot, JobState, ObservedJob
from slurm_gavel.domain.throughputs import ThroughputTable
from slurm_gavel.errors import InputError
from slurm_gavel.job.progress import ReportRefused

log = logging.getLogger("slurm_gavel.daemon")

ABSURD_FACTOR = estimate.ABSURD_FACTOR  # a rate this far from the cell is no measurement
VOTE_MAX_AGE_S = 7 * 86400.0


@dataclass
class ProgressTracker:
    folder: Path
    table: ThroughputTable | None = None  # the configured table: the cells that exist
    # A report older than this is not trusted as the job's current rate.
    max_age_s: float = 600.0
    quorum: int = QUORUM_USERS
    cells: dict[str, Cell] = field(default_factory=dict)
    changed: bool = False  # cells moved since the caller last looked
    # What was last said about each job / user folder (logged once, pruned each round).
    _said: dict[str, str] = field(default_factory=dict)
    # Each sharing job's partner at the last round: a report may still name it for one
    # report interval after the pair split (not refused, not counted).
    _partners: dict[str, str] = field(default_factory=dict)
    _windows: PairWindows = field(default_factory=PairWindows)
    # This merge's reports of the jobs' current runs (same restart count, running,
    # recent): job -> (steps, the step the run resumed from: steps - run_steps), for the
    # daemon's watch on restarts that keep no progress (daemon/run_watch.py).
    current_runs: dict[str, tuple[float, float]] = field(default_factory=dict)
    gid: int = field(default_factory=os.getegid)

    # ---- each round -----------------------------------------------------------------------

    def merge(self, snap: ClusterSnapshot) -> ClusterSnapshot:
        """The snapshot with steps_done / measured_throughput filled from the spool."""
        jobs: list[ObservedJob] = []
        said: dict[str, str] = {}
        user_fds: dict[int, int | None] = {}
        self.current_runs = {}
        by_id = {o.job.id: o for o in snap.jobs}
        self._windows.observe(snap.time, pairings(by_id))
        root_fd: int | None = None
        try:
            root_fd = open_root(self.folder)
        except SpoolProblem as e:
            self._say(said, "spool", str(e))
        try:
            for o in snap.jobs:
                if o.state is JobState.DONE or root_fd is None or o.user_id is None:
                    jobs.append(o)
                    continue
                if o.user_id not in user_fds:
                    user_fds[o.user_id] = self._user_dir(root_fd, o.user_id, said)
                user_fd = user_fds[o.user_id]
                if user_fd is None:
                    jobs.append(o)
                else:
                    jobs.append(self._read(o, user_fd, snap.time, said, by_id))
        finally:
            for fd in [root_fd, *user_fds.values()]:
                if fd is not None:
                    os.close(fd)
        self._said = said  # only what still holds: memory bounded by live jobs and users
        self._partners = {o.job.id: o.partner for o in snap.jobs if o.partner is not None}
        self._learn(snap.time)
        return replace(snap, jobs=tuple(jobs))

    def _say(self, said: dict[str, str], key: str, problem: str) -> None:
        said[key] = problem
        if self._said.get(key) != problem:
            event(log, "progress_refused", logging.WARNING, about=key, problem=problem)

    def _user_dir(self, root_fd: int, uid: int, said: dict[str, str]) -> int | None:
        try:
            return open_user_dir(root_fd, self.folder, uid, self.gid)
        except SpoolProblem as e:
            self._say(said, f"uid {uid}", str(e))
            return None

    def _read(
        self,
        o: ObservedJob,
        user_fd: int,
        now: float,
        said: dict[str, str],
        jobs: Mapping[str, ObservedJob],
    ) -> ObservedJob:
        assert o.user_id is not None
        try:
            report = read_user_report(user_fd, o.job.id, o.user_id)
            return o if report is None else self._apply(o, report, now, jobs)
        except ReportRefused as e:
            self._say(said, f"job {o.job.id}", f"report {o.user_id}/{o.job.id}.json: {e}")
            return o

    def _apply(
        self, o: ObservedJob, r: Mapping[str, Any], now: float, jobs: Mapping[str, ObservedJob]
    ) -> ObservedJob:
        """The job with a checked report applied: its steps done and, for its current
        run, its rate (a vote on its cell, or on its side of a pair cell)."""
        steps, rate, updated, named = check_report(o, r, now, self._partners.get(o.job.id))
        out = o
        if steps is not None and o.steps_done is None:
            cap = o.job.total_steps if o.job.total_steps > 0 else MAX_STEPS
            out = replace(out, steps_done=min(steps, cap))
        restarts = r.get("restart_count")
        current_run = (
            not isinstance(restarts, bool)
            and restarts == o.restarts
            and r.get("state") == "running"
            and now - updated <= self.max_age_s
        )
        run_steps = finite(r.get("run_steps"))
        if current_run and steps is not None and run_steps is not None and 0 <= run_steps <= steps:
            self.current_runs[o.job.id] = (steps, steps - run_steps)
        if named is None and o.partner is not None:
            return self._derived(out, r, steps, updated, now, jobs) if current_run else out
        if named != o.partner:
            return out  # written before the pair split: its rate is the old pairing's
        if o.state is JobState.RUNNING and o.gpu_type is not None and rate and current_run:
            if o.partner is not None:
                return self._apply_paired(out, rate, named, now, jobs)
            cell = at_running_count(o)  # a moldable job: the cell of the count it runs at
            base = self._base(cell.job.job_type, cell.job.scale_factor, o.gpu_type)
            if base is None:
                # A cell the table lacks (a job of no known type): no vote on
                # the table (no made-up rows), only the job's own row, which the round
                # bounds (core/learned_rows/row_trust.py)
                return replace(out, measured_throughput=rate)
            if not base / ABSURD_FACTOR <= rate <= base * ABSURD_FACTOR:
                raise ReportRefused(
                    f"'steps_per_s' {rate:g} is over {ABSURD_FACTOR:g}x off the table's "
                    f"{base:g} for {o.job.job_type} on {o.gpu_type}"
                )
            out = replace(out, measured_throughput=rate)
            self._vote(cell, base, rate, now)
        return out

    def _apply_paired(
        self,
        o: ObservedJob,
        rate: float,
        named: str | None,
        now: float,
        jobs: Mapping[str, ObservedJob],
    ) -> ObservedJob:
        """A sharing job's rate, as a vote on its side of the pair cell."""
        mate = mate_of(o, jobs)
        if named != o.partner or mate is None or o.gpu_type is None or self.table is None:
            return o
        jt, pt, sf = o.job.job_type, mate.job.job_type, o.job.scale_factor
        base = pair_reference(self.table, jt, pt, sf, o.gpu_type)
        if base is None:
            return o  # a pair the table says cannot share, or a made-up row
        if not base / ABSURD_FACTOR <= rate <= base * ABSURD_FACTOR:
            raise ReportRefused(
                f"'steps_per_s' {rate:g} is over {ABSURD_FACTOR:g}x off the table's "
                f"{base:g} for {jt} sharing with {pt} on {o.gpu_type}"
            )
        self._vote(o, base, rate, now, partner_type=pt)
        return replace(o, measured_throughput=rate)

    def _derived(
        self,
        o: ObservedJob,
        r: Mapping[str, Any],
        steps: float | None,
        updated: float,
        now: float,
        jobs: Mapping[str, ObservedJob],
    ) -> ObservedJob:
        """A report naming no partner: the paired rate over its window (pair_windows.py)."""
        run_steps = finite(r.get("run_steps"))
        if steps is None or (run_steps is None and r.get("run_steps") is not None):
            return o
        rate = self._windows.rate(o.job.id, Mark(steps, run_steps, updated), now)
        return o if rate is None else self._apply_paired(o, rate, o.partner, now, jobs)

    def _base(self, job_type: str, scale_factor: int, gpu: str) -> float | None:
        """Where a cell starts and is bounded around (estimate.cell_reference), or None:
        a row the configured table lacks or a "cannot run there" cell learns nothing."""
        if self.table is None:
            return None
        return estimate.cell_reference(self.table, job_type, scale_factor, gpu)

    def _cell_base(self, c: Cell) -> float | None:
        if c.partner_type is None:
            return self._base(c.job_type, c.scale_factor, c.gpu_type)
        if self.table is None:
            return None
        return pair_reference(self.table, c.job_type, c.partner_type, c.scale_factor, c.gpu_type)

    def _vote(
        self, o: ObservedJob, base: float, rate: float, now: float, partner_type: str | None = None
    ) -> None:
        assert o.gpu_type is not None and o.user_id is not None
        new = Cell(o.job.job_type, o.job.scale_factor, o.gpu_type, base, partner_type=partner_type)
        cell = self.cells.setdefault(new.key(), new)
        if o.job.id not in cell.votes:
            # One user's many jobs must not crowd the others out: the user's oldest vote
            # goes first, then the cell's oldest.
            theirs = [j for j, v in cell.votes.items() if v.uid == o.user_id]
            if len(theirs) >= MAX_VOTES_PER_USER:
                del cell.votes[min(theirs, key=lambda j: cell.votes[j].at)]
            elif len(cell.votes) >= MAX_VOTES_PER_CELL:
                del cell.votes[min(cell.votes, key=lambda j: cell.votes[j].at)]
        cell.votes[o.job.id] = Vote(o.user_id, rate, now)

    def _learn(self, now: float) -> None:
        for cell in self.cells.values():
            for job in [j for j, v in cell.votes.items() if now - v.at > VOTE_MAX_AGE_S]:
                del cell.votes[job]
            by_user: dict[int, list[float]] = {}
            for v in cell.votes.values():
                by_user.setdefault(v.uid, []).append(v.rate)
            votes = [statistics.median(r) for r in by_user.values()]
            new = agreed_value(cell.value, votes, self.quorum)
            base = self._cell_base(cell) or cell.value
            new = min(max(new, base / estimate.MAX_DRIFT), base * estimate.MAX_DRIFT)
            if new != cell.value:
                cell.value, cell.agreed = new, len(votes)
                self.changed = True

    def table_observations(self) -> list[estimate.Observation]:
        """The cells that moved on agreement, for estimate.update_table."""
        return [
            estimate.Observation(c.job_type, c.scale_factor, c.gpu_type, c.value, c.agreed)
            for c in self.cells.values()
            if c.agreed >= self.quorum and c.partner_type is None
        ]

    def pair_observations(self) -> list[PairObservation]:
        """The sides of pair cells that moved on agreement, for pair_cells.update_pairs."""
        return [
            PairObservation(
                c.job_type, c.partner_type, c.scale_factor, c.gpu_type, c.value, c.agreed
            )
            for c in self.cells.values()
            if c.agreed >= self.quorum and c.partner_type is not None
        ]

    # ---- persistence (inside the daemon's state file) -------------------------------

    def to_json(self) -> dict[str, Any]:
        return cells_to_json(self.cells)

    def load(self, d: dict[str, Any] | None) -> None:
        """Restore from the state file, dropping (and logging) what cannot be trusted:
        an older version's unchecked observations, non-finite or out-of-range values,
        cells the configured table no longer has."""
        if not d:
            return
        if d.get("format") not in READS:
            old = d.get("observations") or []
            if not old:
                return
            event(
                log,
                "progress_state_repaired",
                logging.WARNING,
                dropped=len(old) if isinstance(old, list) else 1,
                why="saved by an older version without checks (NaN/forged rates possible); "
                "the table relearns from running jobs",
            )
            return
        dropped = 0
        for raw in d.get("cells") or []:
            base_of = self._cell_base if self.table is not None else None
            cell = cell_from_json(raw, base_of)
            if cell is None:
                dropped += 1
            else:
                self.cells[cell.key()] = cell
        if dropped:
            event(log, "progress_state_repaired", logging.WARNING, dropped=dropped,
                  why="cells not finite, out of range or not in the throughput table")  # fmt: skip
        self.changed = bool(self.cells)


def estimate_steps(
    snap: ClusterSnapshot,
    received_s: Mapping[str, Mapping[str, float]],
    restarts: Mapping[str, int],
    table: ThroughputTable,
    preemption_overhead_seconds: float,
) -> ClusterSnapshot:
    """Steps done of jobs that report none, from the time they received on each type.

    steps ~ sum over types of (seconds received x table steps/s), less
    `preemption_overhead_seconds` of the job's fastest rate per restart (checkpoint +
    restore make no progress). Finish-time policies need some steps-remaining figure;
    this is the table's best guess, replaced by the job's own count as soon as it
    reports one.
    """
    jobs: list[ObservedJob] = []
    for o in snap.jobs:
        got = received_s.get(o.job.id)
        if o.state is JobState.DONE or o.steps_done is not None or not got:
            jobs.append(o)
            continue
        try:
            row = table.row(o.job.job_type, o.job.scale_factor)
        except InputError:
            jobs.append(o)  # the round reports the unknown type; nothing to estimate
            continue
        steps = sum(seconds * row.get(t, 0.0) for t, seconds in got.items())
        lost = preemption_overhead_seconds * restarts.get(o.job.id, o.restarts)
        steps -= lost * max(row.values(), default=0)
        cap = o.job.total_steps if o.job.total_steps > 0 else math.inf
        jobs.append(replace(o, steps_done=min(max(0.0, steps), cap), steps_estimated=True))
    return replace(snap, jobs=tuple(jobs))
