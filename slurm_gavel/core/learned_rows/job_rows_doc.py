"""Each job's learned row in the scheduler state's JSON (the learned rows plugin's slot,
``plugins.learned_rows``; ``job_rows`` at the top level in a state file of before the
slots), so a restarted daemon keeps what its jobs were measured doing: its cells, and
with trust bounds the progress behind them (row_trust.Progress per GPU type) and the
job as the last round saw it (job_rows.LastSeen), from which the next interval counts.
Without those a restarted daemon would begin every job's progress again and learn other
cells than an uninterrupted one; states saved before they were kept load with none (the
jobs' progress then starts again at the next round).

The state file is the daemon's own, but its figures came from users' reports: a value
that is not a finite number in range is dropped on load (counted in ``dropped``), never
trusted, and a malformed entry drops that job's row only (a malformed progress cell or
last sighting drops that cell or sighting only).
"""

from __future__ import annotations

import math
from typing import Any

from slurm_gavel.core.learned_rows.job_rows import JobRows, LastSeen, Measured
from slurm_gavel.core.learned_rows.row_trust import Progress, TrustBounds

NAME = "learned_rows"  # the slot's key in the state JSON's "plugins" (the plugin's name)
FORMAT = 1
MAX_RATE = TrustBounds().max_rate
MAX_RUNS = 10**9  # restart counts above this are no restart count
MAX_SECONDS = 1e10
MAX_STEPS = 1e18  # a steps count beyond this is no steps count


# The rows' running counts (a simulation's summary reports them), saved so that they go
# on across a restart instead of starting again from the active jobs' cells.
COUNTS = ("cells_measured", "finished", "finished_unmeasured", "bounded")


def rows_to_json(rows: JobRows) -> dict[str, Any] | None:
    """The learned rows; None when there is nothing to keep (the key is left out)."""
    progress = {j for j, cells in rows.progress.items() if cells}
    # every job seen active: one that ends before the next round is forgotten then
    # (and counted), as without the restart
    jobs = set(rows.measured) | set(rows.anchor) | progress | set(rows.last_seen) | rows.seen
    counts = {k: getattr(rows, k) for k in COUNTS if getattr(rows, k)}
    if not jobs and not counts:
        return None
    out: dict[str, Any] = {
        "format": FORMAT,
        "jobs": {j: _job_to_json(rows, j) for j in sorted(jobs)},
    }
    if counts:
        out["counts"] = counts
    return out


def empty_rows_json() -> dict[str, Any]:
    """No rows, said explicitly (rows_to_json leaves the key out instead)."""
    return {"format": FORMAT, "jobs": {}}


def cell_to_json(m: Measured) -> list[Any]:
    """A measured cell: [rate, seconds, earlier runs' rate, their seconds, run]."""
    return [m.steps_per_s, m.seconds, m.earlier_rate, m.earlier_seconds, m.run]


def cell_from_json(cell: Any) -> Measured | None:
    """A cell saved by cell_to_json (or [rate, seconds], older states), checked; None:
    untrusted."""
    if not isinstance(cell, list) or len(cell) < 2:
        return None
    rate, seconds, *more = cell
    r = trusted_rate(rate)
    s = 0.0 if seconds == 0 and not isinstance(seconds, bool) else trusted_rate(seconds)
    if r is None or s is None or s > MAX_SECONDS:
        return None
    earlier = _earlier(more, s)
    if earlier is None:
        return None
    return Measured(r, s, *earlier)


def _job_to_json(rows: JobRows, j: str) -> dict[str, Any]:
    out: dict[str, Any] = {
        "scale_factor": rows.scale_factor.get(j),
        "measured": {t: cell_to_json(m) for t, m in rows.measured.get(j, {}).items()},
        # copies throughout: the inflight record holds a document while the round goes on
        "anchor": dict(rows.anchor.get(j, {})),
        "untyped": j in rows.untyped,
    }
    # Only with trust bounds (the keys are left out otherwise, as in older states).
    progress = rows.progress.get(j)
    if progress:
        # [steps, seconds, stretches, lost], and the current stretch's share of lost
        # when it began with a restart (a fifth element only then: older states, and
        # older daemons reading this one, have four)
        out["progress"] = {
            t: [p.steps, p.seconds, p.stretches, p.lost]
            + ([] if p.stretch_lost is None else [p.stretch_lost])
            for t, p in progress.items()
        }
    seen = rows.last_seen.get(j)
    if seen is not None:
        out["last_seen"] = {
            "gpu": seen.gpu,
            "restarts": seen.restarts,
            "steps": seen.steps,
            "received": dict(seen.received),
        }
    return out


def _number(v: Any, high: float) -> float | None:
    """A finite number in [0, high], else None (bools are no numbers)."""
    if isinstance(v, bool) or not isinstance(v, int | float):
        return None
    f = float(v)
    return f if math.isfinite(f) and 0.0 <= f <= high else None


def _count(v: Any) -> int | None:
    """A count (restarts, stretches) in [0, MAX_RUNS], else None."""
    if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= MAX_RUNS:
        return None
    return v


def _progress_cell(cell: Any) -> Progress | None:
    """A saved progress cell [steps, seconds, stretches, lost(, the current stretch's
    share of lost)], checked; None: untrusted."""
    if not isinstance(cell, list) or len(cell) not in (4, 5):
        return None
    steps, seconds = _number(cell[0], MAX_STEPS), _number(cell[1], MAX_SECONDS)
    stretches, lost = _count(cell[2]), _number(cell[3], MAX_SECONDS)
    if steps is None or seconds is None or stretches is None or lost is None:
        return None
    share = None
    if len(cell) == 5:
        share = _number(cell[4], MAX_SECONDS)
        if share is None or share > lost or stretches == 0:
            return None
    return Progress(steps, seconds, stretches, lost, share)


def _last_seen(d: Any) -> LastSeen | None:
    """A saved last sighting, checked; None: untrusted."""
    if not isinstance(d, dict):
        return None
    gpu, restarts, steps = d.get("gpu"), _count(d.get("restarts")), d.get("steps")
    if gpu is not None and not isinstance(gpu, str):
        return None
    if restarts is None or not isinstance(d.get("received"), dict):
        return None
    if steps is not None:
        steps = _number(steps, MAX_STEPS)
        if steps is None:
            return None
    received: dict[str, float] = {}
    for t, v in d["received"].items():
        secs = _number(v, MAX_SECONDS)
        if secs is None:
            return None
        received[str(t)] = secs
    return LastSeen(gpu, restarts, steps, received)


def trusted_rate(v: Any) -> float | None:
    """A rate from the state file that may be used: finite, > 0, at most MAX_RATE."""
    if isinstance(v, bool) or not isinstance(v, int | float):
        return None
    f = float(v)
    return f if math.isfinite(f) and 0 < f <= MAX_RATE else None


def _earlier(more: list[Any], seconds: float) -> tuple[float, float, int] | None:
    """A cell's earlier runs and current run as saved, checked; None when untrusted."""
    if not more:
        return 0.0, 0.0, -1
    if len(more) != 3:
        return None
    rate, secs, run = more
    r = 0.0 if rate == 0 and not isinstance(rate, bool) else trusted_rate(rate)
    s = 0.0 if secs == 0 and not isinstance(secs, bool) else trusted_rate(secs)
    if r is None or s is None or s > seconds:
        return None
    if isinstance(run, bool) or not isinstance(run, int) or not -1 <= run <= MAX_RUNS:
        return None
    return r, s, run


def rows_from_json(d: Any) -> tuple[JobRows, int]:
    """The rows saved by rows_to_json, and how many entries were dropped as untrusted."""
    rows = JobRows()
    dropped = 0
    if not isinstance(d, dict) or d.get("format") != FORMAT or not isinstance(d.get("jobs"), dict):
        return rows, 0 if d is None else 1
    for job, raw in d["jobs"].items():
        before = dropped
        try:
            sf = raw.get("scale_factor")
            cells: dict[str, Measured] = {}
            for t, cell in dict(raw.get("measured") or {}).items():
                m = cell_from_json(cell)
                if m is None:
                    dropped += 1
                    continue
                cells[str(t)] = m
            anchor: dict[str, float] = {}
            for t, v in dict(raw.get("anchor") or {}).items():
                # a prior's 0 (the job cannot run there) is an anchor cell as well
                r = 0.0 if v == 0 and not isinstance(v, bool) else trusted_rate(v)
                if r is None:
                    dropped += 1
                    continue
                anchor[str(t)] = r
        except (AttributeError, TypeError, ValueError):
            dropped += 1
            continue
        job = str(job)
        if cells:
            if isinstance(sf, bool) or not isinstance(sf, int) or not 1 <= sf <= 1024:
                dropped += 1
                continue
            rows.measured[job] = cells
            rows.scale_factor[job] = sf
            rows.cells_measured += len(cells)
        if anchor:
            rows.anchor[job] = anchor
        if raw.get("untyped") is True:
            rows.untyped.add(job)
        progress = raw.get("progress") or {}
        if not isinstance(progress, dict):
            dropped += 1
            progress = {}
        for t, cell in progress.items():
            p = _progress_cell(cell)
            if p is None:
                dropped += 1
                continue
            rows.progress.setdefault(job, {})[str(t)] = p
        if raw.get("last_seen") is not None:
            seen = _last_seen(raw["last_seen"])
            if seen is None:
                dropped += 1
            else:
                rows.last_seen[job] = seen
        # active as of the save: a job that ended meanwhile is forgotten at the first
        # round (an entry that kept nothing trusted leaves no trace)
        kept = (rows.measured, rows.anchor, rows.progress, rows.last_seen)
        if dropped == before or any(job in part for part in kept):
            rows.seen.add(job)
    counts = d.get("counts")
    if isinstance(counts, dict):
        for k in COUNTS:
            if k in counts:
                n = _count(counts[k])
                if n is None:
                    dropped += 1
                else:
                    setattr(rows, k, n)
    return rows, dropped
