"""Each job's learned row in the scheduler state's JSON (the learned rows plugin's slot,
``plugins.learned_rows``; ``job_rows`` at the top level in a state file of before the
slots), so a restarted daemon keeps what its jobs were measured doing.

The state file is the daemon's own, but its figures came from users' reports: a value
that is not a finite number in range is dropped on load (counted in ``dropped``), never
trusted, and a malformed entry drops that job's row only.
"""

from __future__ import annotations

import math
from typing import Any

from slurm_gavel.core.job_rows import JobRows, Measured
from slurm_gavel.core.row_trust import TrustBounds

NAME = "learned_rows"  # the slot's key in the state JSON's "plugins" (the plugin's name)
FORMAT = 1
MAX_RATE = TrustBounds().max_rate
MAX_RUNS = 10**9  # restart counts above this are no restart count
MAX_SECONDS = 1e10


def rows_to_json(rows: JobRows) -> dict[str, Any] | None:
    """The learned rows; None when there is nothing to keep (the key is left out)."""
    jobs = set(rows.measured) | set(rows.anchor)
    if not jobs:
        return None
    return {
        "format": FORMAT,
        "jobs": {
            j: {
                "scale_factor": rows.scale_factor.get(j),
                "measured": {
                    t: [m.steps_per_s, m.seconds, m.earlier_rate, m.earlier_seconds, m.run]
                    for t, m in rows.measured.get(j, {}).items()
                },
                "anchor": rows.anchor.get(j, {}),
                "untyped": j in rows.untyped,
            }
            for j in sorted(jobs)
        },
    }


def _rate(v: Any) -> float | None:
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
    r = 0.0 if rate == 0 and not isinstance(rate, bool) else _rate(rate)
    s = 0.0 if secs == 0 and not isinstance(secs, bool) else _rate(secs)
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
        try:
            sf = raw.get("scale_factor")
            cells: dict[str, Measured] = {}
            for t, cell in dict(raw.get("measured") or {}).items():
                # [rate, seconds] (older states), or with the earlier runs folded and
                # the current run: [rate, seconds, earlier rate, earlier seconds, run]
                rate, seconds, *more = cell
                r, s = _rate(rate), _rate(seconds) if seconds != 0 else 0.0
                if r is None or s is None or s > MAX_SECONDS:
                    dropped += 1
                    continue
                earlier = _earlier(more, s)
                if earlier is None:
                    dropped += 1
                    continue
                cells[str(t)] = Measured(r, s, *earlier)
            anchor: dict[str, float] = {}
            for t, v in dict(raw.get("anchor") or {}).items():
                r = _rate(v)
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
        # active as of the save: a job that ended meanwhile is forgotten at the first round
        rows.seen.add(job)
    return rows, dropped
