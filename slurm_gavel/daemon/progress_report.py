"""One job's progress report, checked before anything in it is used.

Users write these files (slurm_gavel/job/progress.py), so every value is hostile
input: check_report() refuses the whole report (ReportRefused, with the reason the
daemon logs) unless its ``job_id`` is the job's, ``updated`` is finite, not in the
future and not older than the job's submission (a file left by an earlier job),
``steps`` and ``steps_per_s`` are finite and in range, and the GPU partner it names
(if any) is the one Slurm shows, or the job's partner of the last round (a pair that
just split).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

from slurm_gavel.core.learned_rows.row_trust import TrustBounds
from slurm_gavel.daemon.progress_cells import finite
from slurm_gavel.domain.cluster_model import ObservedJob
from slurm_gavel.job.progress import JOB_ID, ReportRefused

MAX_CLOCK_SKEW_S = 120.0  # compute nodes' clocks may run this much ahead of ours
MAX_STEPS = 1e15
MAX_STEPS_PER_S = TrustBounds().max_rate  # no training loop runs 10 million steps a second


class CheckedReport(NamedTuple):
    steps: float | None
    steps_per_s: float | None
    updated: float
    partner: str | None  # the job it names as its GPU partner


def shown(v: Any) -> str:
    """A user's value for a log line: repr (control characters escaped), cut short."""
    text = repr(v)
    return text if len(text) <= 40 else text[:37] + "..."


def check_report(
    o: ObservedJob, r: Mapping[str, Any], now: float, last_partner: str | None
) -> CheckedReport:
    """Report ``r`` of job ``o`` read at ``now``, its values checked (module docstring);
    ``last_partner``: the job's GPU partner at the last round, if any."""
    job_id = r.get("job_id")
    if isinstance(job_id, bool) or not isinstance(job_id, str | int) or str(job_id) != o.job.id:
        raise ReportRefused(f"its job_id {shown(job_id)} is not this job's")
    updated = finite(r.get("updated"))
    if updated is None:
        raise ReportRefused("'updated' is not a finite number")
    if updated > now + MAX_CLOCK_SKEW_S:
        raise ReportRefused(f"'updated' is {updated - now:.0f} s in the future")
    if o.job.arrival_time > 0 and updated < o.job.arrival_time - MAX_CLOCK_SKEW_S:
        raise ReportRefused("written before the job was submitted (an earlier job's)")
    steps = finite(r.get("steps"))
    if r.get("steps") is not None and (steps is None or not 0 <= steps <= MAX_STEPS):
        raise ReportRefused(f"'steps' {shown(r.get('steps'))} is not in 0..{MAX_STEPS:g}")
    rate = finite(r.get("steps_per_s"))
    if r.get("steps_per_s") is not None and (rate is None or not 0 <= rate <= MAX_STEPS_PER_S):
        raise ReportRefused(
            f"'steps_per_s' {shown(r.get('steps_per_s'))} is not in 0..{MAX_STEPS_PER_S:g}"
        )
    named = named_partner(r)
    stale = named is not None and named == last_partner
    if named is not None and named != o.partner and not stale:
        seen = "alone" if o.partner is None else f"sharing with job {o.partner}"
        raise ReportRefused(
            f"it names job {shown(named)} as its GPU partner; Slurm shows it {seen}"
        )
    return CheckedReport(steps, rate, updated, named)


def named_partner(r: Mapping[str, Any]) -> str | None:
    """The job id a report names as its GPU partner (``partner``), None when none."""
    named = r.get("partner")
    if named is None:
        return None
    if not isinstance(named, str) or not JOB_ID.fullmatch(named):
        raise ReportRefused(f"'partner' {shown(named)} is not a job id")
    return str(named)
