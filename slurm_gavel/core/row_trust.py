"""How far a job's own reports may move its throughput row (issue 27's trust part).

A job's row (job_rows.py) is what the policy divides GPUs by, and its measurements come
from reports its user writes: hostile input. :class:`TrustBounds` says what a report
may do, and :func:`admit` applies it to one reported rate before it replaces a cell:

* a rate that is not a finite number in (0, ``max_rate``] is no measurement;
* a cell already measured moves by at most ``step_factor`` per round, either way;
* the ratio between two of the job's cells stays within ``ratio_factor`` of the ratio
  its prior had (the *anchor*: its type's table cells, or for a job of no known type the
  estimate it started from). For a typed job the unmeasured prior cells count as they
  are, so its level is bounded too (the table's cell within ``ratio_factor``); a job of
  no known type has no level to hold it to, so only its measured cells bound each
  other (its first report sets its level, with no ratio to distort);
* a cell is measured only for a type the scheduler's accounts show the job ran on
  (``JobAccount.received_s``: rounds Slurm showed it RUNNING there), which the caller
  checks.

The daemon and the simulator run with the same bounds (SchedulerConfig.row_bounds, the
config's ``learning:`` section). Pure functions, no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from slurm_gavel.core.model import GpuType


@dataclass(frozen=True)
class TrustBounds:
    # Ratios between a job's cells stay within this factor of its prior's ratios.
    ratio_factor: float = 4.0
    # A measured cell moves by at most this factor per round.
    step_factor: float = 1.5
    # A rate above this (steps/s) is no measurement.
    max_rate: float = 1e7

    def __post_init__(self) -> None:
        for name in ("ratio_factor", "step_factor", "max_rate"):
            v = getattr(self, name)
            if not (isinstance(v, int | float) and math.isfinite(v) and v >= 1.0):
                raise ValueError(f"{name} must be a finite number >= 1, not {v!r}")


def admit(
    bounds: TrustBounds,
    gpu: GpuType,
    rate: float,
    old: float | None,
    measured: Mapping[GpuType, float],
    anchor: Mapping[GpuType, float],
    *,
    level_free: bool,
) -> float | None:
    """The value the cell ``gpu`` takes for a reported ``rate`` (clamped into the
    bounds), or None when the report moves nothing (not a usable number, or the bounds
    contradict each other: the cell keeps its value).

    measured: the job's other measured cells; anchor: its prior's trusted cells (the
    reference ratios); level_free: True for a job of no known type (unmeasured anchor
    cells do not bound its level)."""
    if isinstance(rate, bool) or not isinstance(rate, int | float):
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
    if lo > hi:
        return None
    return min(max(float(rate), lo), hi)
