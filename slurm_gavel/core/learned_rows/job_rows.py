"""Each job's own throughput row: a prior, replaced cell by cell by what that
job was measured doing.

A job's row is its steps/s on every GPU type of the cluster at its scale factor. It
starts from a prior, in this order:

* its job type's row (cluster_rows.py: the table's cells, estimated or type-blind where
  the table lacks one of the cluster's types), when the table knows the type and size;
* else (a job of a model the table never saw) the estimate from the jobs seen so far:
  low-rank completion with the table's rows *and every measured job* as rows
  (:func:`slurm_gavel.core.learned_rows.estimate_jobs.estimate_job_rows`), its own
  measurements included, so that one measured cell already says how fast it is
  elsewhere (Gavel's estimator);
* else type-blind: the same figure on every type.

A running job's measured rate replaces the cell of the GPU type it runs on, when it
runs alone on consolidated GPUs (a pair's or a spread job's rate is another cell): with
trust bounds (the daemon's and the simulator's default) what its progress there shows
(its reported steps over the scheduler's seconds, row_trust.progress_rate), without
them the rate it reports (``ObservedJob.measured_throughput``: its progress reports on
Slurm; in the simulator the true rate as its measurement model reports it). A job
never measured stays on its prior, and its cells are marked so.

How much the round believes is :class:`Knowledge`: TABLE is the type rows (Gavel's, and
the config's ``learning: {knowledge: table}``), LEARNED the above (the default of the
daemon and the simulator alike, with :class:`row_trust.TrustBounds` on what a report
may move; core/learned_rows/relearn.py says when a changed row re-solves), ORACLE a row given
from outside (the simulator's true rows), TYPE_BLIND no speeds at all. Jobs with equal
rows keep sharing one row object, so the policies still
aggregate them into one class, and an unchanged row is the same object round after
round (the mechanism's cache compares rows by identity).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Protocol

from slurm_gavel.core.cluster_rows import ESTIMATED, TYPE_BLIND, ClusterRows
from slurm_gavel.core.learned_rows.estimate_jobs import estimate_job_rows
from slurm_gavel.core.learned_rows.explore import Exploration, optimistic
from slurm_gavel.core.learned_rows.row_trust import (
    ROUNDING,
    Progress,
    TrustBounds,
    admit,
    loss_estimate,
    progress_range,
    rate_within,
)
from slurm_gavel.domain.cluster_model import JobPlacement, JobState, ObservedJob
from slurm_gavel.domain.model import GpuType, JobId
from slurm_gavel.errors import InputError

Row = Mapping[GpuType, float]

# How a cell of a job's row is backed (besides cluster_rows' ESTIMATED and TYPE_BLIND).
MEASURED = "measured"  # this job ran there and reported its rate
PRIOR = "prior"  # its job type's figure, never measured for this job
GIVEN = "given"  # handed to the round from outside (the simulator's oracle)


class Knowledge(StrEnum):
    TABLE = "table"  # the job type's row (Gavel's; learning: {knowledge: table})
    LEARNED = "learned"  # a prior replaced cell by cell by the job's measurements
    ORACLE = "oracle"  # the job's true row, given (simulator only)
    TYPE_BLIND = "type-blind"  # no speeds: every GPU type equally fast for every job


@dataclass(frozen=True)
class Measured:
    steps_per_s: float
    # seconds the scheduler had the job on that type when it last reported: how much
    # running time backs the figure (status and explain show it)
    seconds: float
    # The runs before the current one, folded (measured_cell): their time-weighted
    # rate and seconds, and the current run (the job's restart count).
    earlier_rate: float = 0.0
    earlier_seconds: float = 0.0
    run: int = -1

    # Written out instead of generated (as ObservedJob's): a frozen dataclass's
    # __init__ pays an object.__setattr__ per field, and the round makes one of these
    # per running job per round. Same signature, same frozen instance.
    def __init__(
        self,
        steps_per_s: float,
        seconds: float,
        earlier_rate: float = 0.0,
        earlier_seconds: float = 0.0,
        run: int = -1,
    ) -> None:
        d = self.__dict__
        d["steps_per_s"], d["seconds"], d["earlier_rate"] = steps_per_s, seconds, earlier_rate
        d["earlier_seconds"], d["run"] = earlier_seconds, run


def measured_cell(old: Measured | None, rate: float, seconds: float, run: int) -> Measured:
    """The cell after a report of ``rate`` from run ``run`` with ``seconds`` on the type
    in all: a report stands for its whole run (the job library times steps_per_s over
    the run, warm-up left out, so a later report of the same run replaces an earlier
    one), and runs are averaged by their seconds, so one run's error (a loaded node, its
    data) fades as runs add up. A report equal to the figure keeps it exactly."""
    if old is None:
        return Measured(rate, seconds, 0.0, 0.0, run)
    earlier_rate, earlier_s = old.earlier_rate, old.earlier_seconds
    if run != old.run:  # a new run: the last one's figure joins the earlier runs'
        earlier_rate, earlier_s = old.steps_per_s, old.seconds
    current_s = seconds - earlier_s
    if earlier_s <= 0.0 or current_s <= 0.0:
        value = rate if earlier_s <= 0.0 else earlier_rate
    else:
        value = earlier_rate + (rate - earlier_rate) * current_s / (earlier_s + current_s)
    return Measured(value, seconds, earlier_rate, earlier_s, run)


@dataclass(frozen=True)
class LastSeen:
    """A job at the last round: the type it ran on alone (RUNNING, no partner) or None,
    its restart count (Slurm's), its steps done (None: not reported) and its seconds
    per type in the accounts then."""

    gpu: GpuType | None
    restarts: int
    steps: float | None
    received: dict[GpuType, float]

    # Written out, as Measured's (one per active job per round).
    def __init__(
        self,
        gpu: GpuType | None,
        restarts: int,
        steps: float | None,
        received: dict[GpuType, float],
    ) -> None:
        d = self.__dict__
        d["gpu"], d["restarts"], d["steps"], d["received"] = gpu, restarts, steps, received


@dataclass
class JobRows:
    """What the scheduler learned per job (the learned rows' slot,
    SchedulerState.plugins.learned_rows, in the daemon's state file: job_rows_doc.py),
    and the rows built from it."""

    measured: dict[JobId, dict[GpuType, Measured]] = field(default_factory=dict)
    scale_factor: dict[JobId, int] = field(default_factory=dict)  # of the measured jobs
    # Bumped whenever a job's row changes value: the round's memo is stale then.
    revision: int = 0
    # For a summary: cells measured so far, and finished jobs that were never measured.
    cells_measured: int = 0
    finished: int = 0
    finished_unmeasured: int = 0
    seen: set[JobId] = field(default_factory=set, repr=False)  # active in a LEARNED round
    # With trust bounds (row_trust.py): each job's prior as first seen (the reference
    # ratios its reports are held to), the jobs of no known type among them, and how
    # many reports the bounds clamped or refused.
    anchor: dict[JobId, dict[GpuType, float]] = field(default_factory=dict)
    untyped: set[JobId] = field(default_factory=set)
    bounded: int = 0
    # Each job's last bounded report: (GPU type, the rate reported, the rate used or
    # None when it moved nothing), for the daemon's log (events.RoundEvents.rows_bounded)
    clamped: dict[JobId, tuple[GpuType, float, float | None]] = field(default_factory=dict)
    # With trust bounds: what each job's progress showed per GPU type (row_trust.Progress:
    # steps made over the seconds the accounts had it running alone there), and each
    # job as the last round saw it, for the next interval. In the state file with the
    # cells (job_rows_doc.py): a restarted daemon goes on from them as an uninterrupted
    # one would, its cells resting on the same progress.
    progress: dict[JobId, dict[GpuType, Progress]] = field(default_factory=dict, repr=False)
    last_seen: dict[JobId, LastSeen] = field(default_factory=dict, repr=False)
    # Jobs whose unmeasured cells look better while they have exploration budget left
    # (explore.py); transient: recomputed from the accounts each round.
    exploring: set[JobId] = field(default_factory=set, repr=False)
    # job -> (the prior its row was built on, the row): rebuilt when either changes
    _rows: dict[JobId, tuple[Row, Row]] = field(default_factory=dict, repr=False)
    # id(prior) -> (prior, its type-blind row): one object per kind, round after round
    _blind: dict[int, tuple[Row, Row]] = field(default_factory=dict, repr=False)
    # scale factor -> (revision, {job: estimated prior}) for jobs of no known type
    _untyped: dict[int, tuple[int, dict[JobId, dict[GpuType, float]]]] = field(
        default_factory=dict, repr=False
    )


class Account(Protocol):
    """What record_measurements reads of a job's account (scheduler_state.JobAccount)."""

    received_s: dict[GpuType, float]
    restarts: int


def usable_rate(value: object) -> float | None:
    """A reported rate the round may use: a finite number > 0 (else None)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    v = float(value)
    return v if math.isfinite(v) and v > 0 else None


def record_measurements(
    rows: JobRows,
    active: Iterable[ObservedJob],
    placement: Mapping[JobId, JobPlacement],
    accounts: Mapping[JobId, Account],
    bounds: TrustBounds | None = None,
    explore: Exploration | None = None,
    restart_s: Mapping[JobId, float] | None = None,
) -> None:
    """Fold the running jobs' measured rates into ``rows`` (LEARNED rounds), and forget
    the jobs no longer active. Only a job RUNNING alone, on the type the backend says,
    on GPUs the last placement called consolidated, measures its own cell. With
    ``bounds`` (the daemon: reports are user input) only on a type the job's account
    shows time on, at the rate its progress there shows (row_trust.progress_rate: its
    steps over the scheduler's seconds, less what its restarts are taken to have lost,
    ``restart_s``: per job, what the rounds plan one restart to cost), within the
    bounds (row_trust.admit); the rate it reports only says whether it lied (a report
    outside its progress range is counted and logged)."""
    seen: set[JobId] = set()
    # The loop runs for every active job in every round (the simulator's largest item
    # at thousands of jobs): lookups hoisted, the restart loss computed only for a
    # stretch that begins with a restart, the same arithmetic in the same order.
    seen_add, rows_seen_add = seen.add, rows.seen.add
    get_account, get_placed = accounts.get, placement.get
    running = JobState.RUNNING
    for o in active:
        job_id = o.job.id
        seen_add(job_id)
        rows_seen_add(job_id)
        acct = get_account(job_id)
        if explore is not None or rows.exploring:
            _explore(rows, explore, o, acct)
        placed = get_placed(job_id)
        if bounds is not None:
            _progress(rows, o, placed, acct, bounds, restart_s)
        t = o.gpu_type
        if o.state is not running or t is None or o.partner is not None:
            continue
        reported = o.measured_throughput
        if type(reported) is float:  # usable_rate's test, inlined for a plain float
            rate = reported if 0.0 < reported < math.inf else None
        else:
            rate = usable_rate(reported)
        if rate is None and bounds is None:
            continue
        if placed is not None and not placed.consolidated:
            continue
        got = _NO_TIME if acct is None else acct.received_s
        if bounds is not None:
            # The cell is what the job did, whatever it claims: a claim anywhere in its
            # progress range would otherwise set the cell to the range's top, R / (R -
            # allowance x stretches) above the truth (9 % after one 360 s round), and
            # the policies that plan finishing times give it that much more.
            admitted = _bounded(rows, bounds, job_id, t, rate, got)
            if admitted is None:
                continue
            rate = admitted
        assert rate is not None
        _record(rows, o, t, rate, got)
    if len(rows.seen) != len(seen):
        for j in [j for j in rows.seen if j not in seen]:
            _forget(rows, j)


_NO_TIME: Mapping[GpuType, float] = {}
_NO_CELLS: Mapping[GpuType, Measured] = {}


def _progress(
    rows: JobRows,
    o: ObservedJob,
    placed: JobPlacement | None,
    acct: Account | None,
    bounds: TrustBounds,
    restart_s: Mapping[JobId, float] | None = None,
) -> None:
    """Count the interval since the last round into the job's progress on a type, when
    both rounds know its steps done and the job ran alone on that type through it: the
    last placement put it there (consolidated, no partner) and it is RUNNING there now.
    A new stretch begins unless the last round saw it running alone there in the same
    run (Slurm's restart count unchanged); one that begins with a restart (the count
    rose) is taken to have lost what ``restart_s`` says for the job to it
    (row_trust.loss_estimate)."""
    got: Mapping[GpuType, float] = _NO_TIME if acct is None else acct.received_s
    t = o.gpu_type
    alone = o.state is JobState.RUNNING and t is not None and o.partner is None
    job_id = o.job.id
    prev = rows.last_seen.get(job_id)
    steps: float | None = None
    if not o.steps_estimated:
        v = o.steps_done
        # a plain float (the simulator's, and JSON's): usable_steps' test, inlined
        steps = (v if 0.0 <= v < math.inf else None) if type(v) is float else usable_steps(v)
    if (
        alone
        and t is not None
        and prev is not None
        and prev.steps is not None
        and steps is not None
        and placed is not None
        and placed.gpu_type == t
        and placed.partner is None
        and placed.consolidated
    ):
        restarts = o.restarts
        continuing = prev.gpu == t and prev.restarts == restarts
        seconds = got.get(t, 0.0) - prev.received.get(t, 0.0)
        cells = rows.progress.get(job_id)
        if cells is None:
            cells = rows.progress[job_id] = {}
        cell = cells.get(t)
        if cell is None:
            cell = cells[t] = Progress()
        restarted = restarts != prev.restarts
        lost, loss_now = 0.0, None
        if restarted or (continuing and cell.stretch_lost is not None):
            # what a restart of the job costs as the rounds plan it now: the loss of the
            # stretch a restart begins, or again that of the restart that began the
            # stretch going on (row_trust.Progress.stretch_lost)
            cost = loss_estimate(bounds, None if restart_s is None else restart_s.get(job_id))
            if restarted:
                lost = cost
            else:
                loss_now = cost
        cell.add(steps - prev.steps, seconds, not continuing, lost, loss_now=loss_now)
    rows.last_seen[job_id] = LastSeen(t if alone else None, o.restarts, steps, dict(got))


def usable_steps(value: object) -> float | None:
    """A reported steps-done figure the progress check may use: a finite number >= 0."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    v = float(value)
    return v if math.isfinite(v) and v >= 0 else None


def _explore(rows: JobRows, explore: Exploration | None, o: ObservedJob, acct: object) -> None:
    """Keep ``rows.exploring`` in step with the job's budget (a change rebuilds its row)."""
    received = getattr(acct, "received_s", {})
    restarts = getattr(acct, "restarts", 0)
    inside = explore is not None and explore.within_budget(restarts, received, o.job.scale_factor)
    if inside == (o.job.id in rows.exploring):
        return
    if inside:
        rows.exploring.add(o.job.id)
    else:
        rows.exploring.discard(o.job.id)
    rows._rows.pop(o.job.id, None)
    rows.revision += 1


def _bounded(
    rows: JobRows,
    bounds: TrustBounds,
    job_id: JobId,
    t: GpuType,
    rate: float | None,
    got: Mapping,
) -> float | None:
    """The rate the job's progress on ``t`` sets (row_trust.progress_rate, within
    row_trust.admit's bounds), None when it sets nothing. A reported ``rate`` (None: none
    usable) outside the progress range is counted and kept for the daemon's log."""
    if not got.get(t, 0.0) > 0.0:
        return None  # no time on that type in the accounts: not measured there
    by_type = rows.progress.get(job_id)
    progress = None if by_type is None else by_type.get(t)
    shown = progress_range(bounds, progress)
    if shown is None or progress is None:
        return None  # no progress to check it against yet: it waits (not a lie)
    did = rate_within(bounds, progress, shown)
    cells = rows.measured.get(job_id, _NO_CELLS)
    old = cells.get(t)
    # the job's other measured cells (most jobs have one cell, this one: none)
    others: Mapping[GpuType, float] = _NO_TIME
    if len(cells) > (0 if old is None else 1):
        others = {u: m.steps_per_s for u, m in cells.items() if u != t}
    anchor = rows.anchor.get(job_id, _NO_TIME)
    out = admit(
        bounds,
        t,
        did,
        None if old is None else old.steps_per_s,
        others,
        anchor,
        level_free=job_id in rows.untyped,
        progress=shown,
    )
    if rate is not None and not (
        shown[0] * (1 - ROUNDING) <= rate <= shown[1] * (1 + ROUNDING) and rate <= bounds.max_rate
    ):
        rows.bounded += 1
        rows.clamped[job_id] = (t, rate, out)
    return out


def _record(rows: JobRows, o: ObservedJob, t: GpuType, rate: float, got: Mapping) -> None:
    job_id = o.job.id
    cells = rows.measured.setdefault(job_id, {})
    old = cells.get(t)
    cell = cells[t] = measured_cell(old, rate, got.get(t, 0.0), o.restarts)
    rows.scale_factor[job_id] = o.job.scale_factor
    rate = cell.steps_per_s
    if old is None:
        rows.cells_measured += 1
    elif old.steps_per_s == rate:
        return  # only its seconds moved
    built = rows._rows.get(job_id)
    if built is not None and built[1].get(t, rate) == rate:
        # the row already says so (a measurement equal to the prior: every job of a
        # trace without true rows), or the type is not the cluster's: nothing to redo
        return
    rows._rows.pop(job_id, None)
    rows.revision += 1


def _forget(rows: JobRows, job_id: JobId) -> None:
    rows.seen.discard(job_id)
    rows.finished += 1
    if not rows.measured.pop(job_id, None):
        rows.finished_unmeasured += 1
    rows.scale_factor.pop(job_id, None)
    rows._rows.pop(job_id, None)
    rows.anchor.pop(job_id, None)
    rows.untyped.discard(job_id)
    rows.exploring.discard(job_id)
    rows.clamped.pop(job_id, None)
    rows.progress.pop(job_id, None)
    rows.last_seen.pop(job_id, None)


@dataclass
class RowSource:
    """Each job's row for one round (round_jobs.py calls :meth:`row` per job)."""

    knowledge: Knowledge
    cluster: ClusterRows
    rows: JobRows
    given: Mapping[JobId, Row] = field(default_factory=dict)
    # Set: keep each job's first prior as the anchor its reports are bounded by.
    bounds: TrustBounds | None = None
    # Set: the exploring jobs' unmeasured cells times its bonus (explore.py).
    explore: Exploration | None = None

    def row(self, o: ObservedJob) -> Row:
        """The job's row; raises InputError where there is nothing to run it on (a job
        type the table lacks under TABLE knowledge, as today)."""
        job = o.job
        if self.knowledge is Knowledge.ORACLE:
            given = self.given.get(job.id)
            if given is not None:
                return given
        prior = self.prior(o)
        if self.knowledge is Knowledge.TYPE_BLIND:
            return self._type_blind(prior)
        if self.knowledge is not Knowledge.LEARNED:
            return prior
        built = self.rows._rows.get(job.id)
        if built is not None and built[0] is prior:
            return built[1]  # (a changed measurement drops the entry: _record)
        if self.bounds is not None and job.id not in self.rows.anchor:
            self.rows.anchor[job.id] = dict(prior)
            if not self.cluster.filled.has(job.job_type, job.scale_factor):
                self.rows.untyped.add(job.id)
        out: Row = prior
        cells = self.rows.measured.get(job.id)
        if cells:
            row = dict(prior)
            for t, m in cells.items():
                if t in row and row[t] != m.steps_per_s:
                    row[t] = m.steps_per_s
                    out = row
        if self.explore is not None and job.id in self.rows.exploring:
            done = self.rows.measured.get(job.id, {})
            if any(t not in done for t in self.cluster.gpu_types):
                out = optimistic(out, done, self.explore.bonus)
        self.rows._rows[job.id] = (prior, out)
        return out

    def prior(self, o: ObservedJob) -> Row:
        job = o.job
        if self.cluster.filled.has(job.job_type, job.scale_factor):
            return self.cluster.row(job.job_type, job.scale_factor)
        if self.knowledge is Knowledge.TABLE:
            self.cluster.row(job.job_type, job.scale_factor)  # raises the table's error
        return self._untyped_prior(job.id, job.scale_factor)

    def marks(self, o: ObservedJob) -> dict[GpuType, str]:
        """{GPU type: MEASURED, GIVEN, PRIOR, ESTIMATED or TYPE_BLIND} for the job's
        cells on the cluster's types: what backs each figure the round uses."""
        job = o.job
        types = self.cluster.gpu_types
        if self.knowledge is Knowledge.ORACLE and job.id in self.given:
            return dict.fromkeys(types, GIVEN)
        if self.knowledge is Knowledge.TYPE_BLIND:
            return dict.fromkeys(types, TYPE_BLIND)
        typed = self.cluster.filled.has(job.job_type, job.scale_factor)
        out = dict.fromkeys(types, PRIOR if typed else TYPE_BLIND)
        if typed:
            out.update(self.cluster.marks(job.job_type, job.scale_factor))
        elif self._estimable(job.scale_factor):
            out = dict.fromkeys(types, ESTIMATED)
        if self.knowledge is Knowledge.LEARNED:
            for t in self.rows.measured.get(job.id, {}):
                if t in out:
                    out[t] = MEASURED
        return out

    def _type_blind(self, prior: Row) -> Row:
        """Every cluster type at the prior's geometric mean over the cluster's types:
        the same magnitude (a policy that plans durations needs one), no preference."""
        hit = self.rows._blind.get(id(prior))
        if hit is not None and hit[0] is prior:
            return hit[1]
        types = self.cluster.gpu_types
        values = [prior.get(t, 0.0) for t in types if prior.get(t, 0.0) > 0]
        value = math.exp(sum(math.log(v) for v in values) / len(values)) if values else 0.0
        row = dict.fromkeys(types, value)
        self.rows._blind[id(prior)] = (prior, row)
        return row

    def _estimable(self, sf: int) -> bool:
        table = self.cluster.filled
        return any(s == sf for _, s in table.alone) or any(
            s == sf for s in self.rows.scale_factor.values()
        )

    def _untyped_prior(self, job_id: JobId, sf: int) -> Row:
        """A job of no known type: its row estimated from the table's rows and the
        measured jobs at its size (its own measurements included); type-blind with
        nothing to go on. Refitted when a measurement changes (the revision)."""
        rows = self.rows
        hit = rows._untyped.get(sf)
        if hit is None or hit[0] != rows.revision or job_id not in hit[1]:
            wanted = [job_id] + [j for j, s in rows.scale_factor.items() if s == sf]
            measured = {
                j: {t: m.steps_per_s for t, m in rows.measured.get(j, {}).items()} for j in wanted
            }
            est = estimate_job_rows(self.cluster.filled, sf, self.cluster.gpu_types, measured)
            if hit is not None and hit[0] == rows.revision:
                est = {**hit[1], **est}
            rows._untyped[sf] = (rows.revision, est)
            hit = rows._untyped[sf]
        row = hit[1].get(job_id)
        if row is None:
            raise InputError(f"no GPU type to estimate job {job_id}'s throughput on")
        return row


def row_source(
    knowledge: Knowledge,
    cluster: ClusterRows,
    rows: JobRows,
    given: Mapping[JobId, Row],
    bounds: TrustBounds | None = None,
    explore: Exploration | None = None,
) -> RowSource | None:
    """The round's per-job rows; None under TABLE knowledge (the type rows, unchanged)."""
    if knowledge is Knowledge.TABLE:
        return None
    return RowSource(knowledge, cluster, rows, given, bounds, explore)
