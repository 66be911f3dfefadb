"""How far a job's own reports may move its throughput row.

A job's row (job_rows.py) is what the policy divides GPUs by, and its measurements come
from reports its user writes: hostile input. A cell takes what the job's progress shows
(:func:`progress_rate`: its steps over the scheduler's seconds on that type, less the
start-up its restarts are taken to have lost), never the rate it claims: a claim
anywhere inside the progress range would otherwise set the cell to the range's top.
:class:`TrustBounds` says what that figure may do, and :func:`admit` applies it before
it replaces a cell:

* a rate that is not a finite number in (0, ``max_rate``] is no measurement;
* a cell already measured moves by at most ``step_factor`` per round, either way;
* the ratio between two of the job's cells stays within ``ratio_factor`` of the ratio
  its prior had (the *anchor*: its type's table cells, or for a job of no known type the
  estimate it started from). For a typed job the unmeasured prior cells count as they
  are, so its level is bounded by the table too (within ``ratio_factor``);
* the rate stays within what the job's own progress shows (:class:`Progress`,
  :func:`progress_range`): the steps it made while the scheduler's accounts had it
  running alone on that type, over those seconds (where the bounds above exclude that
  range, it alone). Its level (the figure a job of no known type has
  nothing else to hold it to) is therefore what it did, not what it says; a cell with
  no such progress yet is not measured;
* a cell is measured only for a type the scheduler's accounts show the job ran on
  (``JobAccount.received_s``: rounds Slurm showed it RUNNING there), which the caller
  checks.

Why the progress bound is sound, and what it leaves (docs/design.md section 1.2.1,
"Progress bounds the level"): the seconds are the scheduler's (Slurm's RUNNING state
and the round clock), the steps are the job's, in its own unit, the unit its declared
total steps is counted in. A job cannot have run slower than the steps it made over
the seconds it ran (the range's low end), nor, if no stretch of running lost more than
``start_allowance_s`` to start-up, faster than those steps over the seconds left once
each stretch has lost that much (its high end). A lie about the rate alone is caught
by its own step counts; a lie that scales the rate, the steps done and the total steps
alike is a change of unit, which the policies that plan with remaining steps over rate
(finish-time fairness, min total duration, min cost's SLOs) and those that normalise a
job by its own row (the max-min family) do not see.

The daemon and the simulator run with the same bounds (the learned rows plugin's
settings, SchedulerConfig.plugins.learned_rows: the config's ``learning:`` section).
Pure functions, no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from slurm_gavel.domain.model import GpuType


@dataclass(frozen=True)
class TrustBounds:
    # Ratios between a job's cells stay within this factor of its prior's ratios.
    ratio_factor: float = 4.0
    # A measured cell moves by at most this factor per round.
    step_factor: float = 1.5
    # A rate above this (steps/s) is no measurement.
    max_rate: float = 1e7
    # Seconds each stretch of running may lose without progress (start-up, restoring
    # a checkpoint, the lag of its last report): the high end of a cell's progress
    # range leaves that much of every stretch out (a report beyond it is a lie), and
    # the start-up a restarted stretch is taken to have lost is at most this. The
    # simulator's restart overhead.
    start_allowance_s: float = 30.0

    def __post_init__(self) -> None:
        for name in ("ratio_factor", "step_factor", "max_rate"):
            v = getattr(self, name)
            if not (isinstance(v, int | float) and math.isfinite(v) and v >= 1.0):
                raise ValueError(f"{name} must be a finite number >= 1, not {v!r}")
        v = self.start_allowance_s
        if isinstance(v, bool) or not (isinstance(v, int | float) and 0 <= v < math.inf):
            raise ValueError(f"start_allowance_s must be a finite number >= 0, not {v!r}")


@dataclass
class Progress:
    """What the scheduler saw a job do on one GPU type: the steps it made between rounds
    in which the accounts had it running alone there, the seconds they credited, and
    in how many stretches (a stretch: rounds seen back to back in one run; each new one
    may have lost up to start_allowance_s to start-up)."""

    steps: float = 0.0
    seconds: float = 0.0
    stretches: int = 0
    # The seconds its stretches are taken to have lost to start-up: each stretch that
    # began with a restart, what the rounds plan a restart of the job to cost (at most
    # start_allowance_s); a first start or a stretch within one run, nothing.
    lost: float = 0.0
    # The current stretch's share of ``lost`` when it began with a restart (None: it did
    # not). Estimated again in each interval the stretch goes on: on Slurm the restart's
    # cost is measured only once the restarted run reports, after its stretch began, and
    # until then the estimate is the whole allowance (an honest job's cell, 2x its rate
    # after a minute at 30 s lost instead of the 2.5 s measured, stayed that high).
    stretch_lost: float | None = None

    def add(
        self,
        steps: float,
        seconds: float,
        new_stretch: bool,
        lost: float = 0.0,
        *,
        loss_now: float | None = None,
    ) -> None:
        """One interval between two rounds (the caller checks both ends); ``lost``: the
        start-up a new stretch is taken to have lost (the caller's estimate, bounded);
        ``loss_now``: the caller's estimate now of what a restart costs the job (bounded
        as ``lost``), which replaces the share of a continuing stretch that began with a
        restart."""
        if not (math.isfinite(steps) and math.isfinite(seconds)):
            return
        if steps < 0.0 or seconds <= 0.0:
            return  # steps went back (an older checkpoint): this interval shows nothing
        self.steps += steps
        self.seconds += seconds
        if new_stretch or self.stretches == 0:
            self.stretches += 1
            self.stretch_lost = None
            if math.isfinite(lost) and lost > 0.0:
                self.lost += lost
                self.stretch_lost = lost
        elif (
            self.stretch_lost is not None
            and loss_now is not None
            and math.isfinite(loss_now)
            and loss_now >= 0.0
            and loss_now != self.stretch_lost
        ):
            self.lost = max(self.lost - self.stretch_lost + loss_now, 0.0)
            self.stretch_lost = loss_now


def progress_range(bounds: TrustBounds, p: Progress | None) -> tuple[float, float] | None:
    """The rates (steps/s) the job's progress on a type allows: [steps / seconds,
    steps / (seconds - start_allowance_s x stretches)], or None while it shows too little
    to bound the rate from above (no time beyond the start-up allowance yet)."""
    if p is None or p.seconds <= 0.0:
        return None
    left = p.seconds - bounds.start_allowance_s * p.stretches
    if left <= 0.0:
        return None
    return p.steps / p.seconds, p.steps / left


def loss_estimate(bounds: TrustBounds, restart_s: float | None) -> float:
    """What one stretch that began with a restart is taken to have lost: the restart's
    cost as the rounds plan it (``restart_s``: measured per job, else configured),
    within [0, start_allowance_s]; the allowance where nothing says (None)."""
    a = bounds.start_allowance_s
    if restart_s is None or isinstance(restart_s, bool) or not isinstance(restart_s, int | float):
        return a
    if math.isnan(restart_s):
        return a
    if not math.isfinite(restart_s):
        return a if restart_s > 0 else 0.0
    return min(max(float(restart_s), 0.0), a)


def progress_rate(bounds: TrustBounds, p: Progress | None) -> float | None:
    """The rate (steps/s) a cell takes from the job's progress on a type: its steps over
    its seconds less the start-up its restarts are taken to have lost, S / (R - L), a
    point of progress_range (L <= start_allowance_s x stretches); None where that range
    is None. It depends on the job's steps and the scheduler's clock, never on the rate
    the job reports: a report that claims more than it did cannot move it."""
    shown = progress_range(bounds, p)
    if shown is None or p is None:
        return None
    return rate_within(bounds, p, shown)


def rate_within(bounds: TrustBounds, p: Progress, shown: tuple[float, float]) -> float:
    """progress_rate given its progress_range ``shown`` (not None), computed once."""
    left = p.seconds - min(p.lost, bounds.start_allowance_s * p.stretches)
    return min(max(p.steps / left, shown[0]), shown[1])


# Relative rounding of Progress's sums of steps and seconds over many intervals: a
# value this close to the cell's figure or its prior's is that figure (admit).
ROUNDING = 1e-9


def admit(
    bounds: TrustBounds,
    gpu: GpuType,
    rate: float,
    old: float | None,
    measured: Mapping[GpuType, float],
    anchor: Mapping[GpuType, float],
    *,
    level_free: bool,
    progress: tuple[float, float] | None = None,
) -> float | None:
    """The value the cell ``gpu`` takes for a reported ``rate`` (clamped into the
    bounds), or None when the report moves nothing (not a usable number, or the bounds
    contradict each other: the cell keeps its value).

    measured: the job's other measured cells; anchor: its prior's trusted cells (the
    reference ratios); level_free: True for a job of no known type (unmeasured anchor
    cells do not bound its level); progress: the range its progress allows on ``gpu``
    (progress_range). The progress range narrows the other bounds, and where the two
    do not meet it alone bounds the rate: what the job did is evidence, the others
    are priors and damping."""
    if type(rate) is not float and (isinstance(rate, bool) or not isinstance(rate, int | float)):
        return None
    if not math.isfinite(rate) or not 0 < rate <= bounds.max_rate:
        return None
    lo, hi = 0.0, math.inf
    if old is not None:
        lo, hi = old / bounds.step_factor, old * bounds.step_factor
    ref = anchor.get(gpu)
    if ref is not None and ref > 0:
        for u, ref_u in anchor.items():
            if u == gpu or not ref_u > 0:
                continue
            value = measured.get(u)
            if value is None:
                if level_free:
                    continue
                value = ref_u
            expected = value * ref / ref_u
            lo = max(lo, expected / bounds.ratio_factor)
            hi = min(hi, expected * bounds.ratio_factor)
    if progress is not None:
        p_lo, p_hi = progress
        if max(lo, p_lo) <= min(hi, p_hi):
            lo, hi = max(lo, p_lo), min(hi, p_hi)
        else:
            # What the job did contradicts the priors (its prior's ratios, the damping
            # of a step): the evidence decides, and the claim only within it. Else a
            # job whose steps are counted in another unit than its type's table (its
            # rate held to the table, its steps not) would plan wrong finishing times.
            lo, hi = p_lo, p_hi
    elif lo > hi:
        return None
    value = min(max(float(rate), lo), hi)
    # The progress sums' rounding must not move a cell: a figure 1e-16 off its prior
    # or its last value would rebuild the job's row (equal rows then no longer
    # aggregate into one class) and make an honest report and a clamped lie differ.
    for same in (old, ref):
        if same is not None and abs(value - same) <= ROUNDING * same:
            return same
    return value
