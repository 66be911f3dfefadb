"""Gavel's measurement window: JCTs of jobs A..B-1 of a continuous trace.

Gavel's continuous-load figures measure jobs 4000-5000 of a Poisson trace: the
first 4,000 jobs bring the cluster to its steady state, arrivals continue while
the window's jobs run (so they see the load of the given rate to the end), and
the run stops once all of them have finished. Jobs are counted by their position
in arrival order (0-based, Gavel's numbering), not by their id.

The trace must therefore reach past the window: if its last job arrived before
the window's last job finished, the load fell off during the window and the JCTs
are optimistic; `trace_exhausted` says so.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from slurm_gavel.domain.model import Job
from slurm_gavel.errors import InputError


@dataclass(frozen=True)
class Window:
    first: int  # position of the first measured job (inclusive)
    end: int  # one past the last measured job

    def ids(self, jobs: Sequence[Job]) -> frozenset[str]:
        if self.end > len(jobs):
            raise InputError(
                f"--measure-jobs {self}: the trace has only {len(jobs)} jobs; generate more "
                f"than {self.end} so that arrivals continue while the window runs"
            )
        return frozenset(j.id for j in jobs[self.first : self.end])

    def __str__(self) -> str:
        return f"{self.first}:{self.end}"


def parse_window(text: str) -> Window:
    """'4000:5000' -> jobs 4000..4999 (as Python's range)."""
    first, sep, end = text.partition(":")
    try:
        a, b = int(first), int(end)
    except ValueError:
        a = b = -1
    if not sep or a < 0 or b <= a:
        raise InputError(f"--measure-jobs '{text}': expected FIRST:END with 0 <= FIRST < END")
    return Window(a, b)


def apply_window(summary: dict[str, Any], jobs: Sequence[Job], window: Window) -> dict[str, Any]:
    """The summary with its JCT metrics over the window's jobs only.

    `jobs`, `avg_jct_s`, `p50_jct_s`, `p99_jct_s` and `jct_s` then describe the
    window; the figures over every job completed before the stop move to
    `all_completed`, and `measure_window` says what was measured.
    """
    ids = window.ids(jobs)
    arrival = {j.id: j.arrival_time for j in jobs}
    all_jct = summary["jct_s"]
    mine = {j: v for j, v in all_jct.items() if j in ids}
    values = np.array(list(mine.values()), dtype=float)
    stop = max((arrival[j] + v for j, v in mine.items()), default=None)
    last_arrival = jobs[-1].arrival_time if jobs else 0.0
    out = dict(summary)
    out["all_completed"] = {
        "jobs": summary["jobs"],
        "avg_jct_s": summary["avg_jct_s"],
        "p50_jct_s": summary["p50_jct_s"],
        "p99_jct_s": summary["p99_jct_s"],
    }
    out["jobs"] = len(mine)
    out["avg_jct_s"] = _r(float(values.mean())) if values.size else None
    out["p50_jct_s"] = _r(float(np.percentile(values, 50))) if values.size else None
    out["p99_jct_s"] = _r(float(np.percentile(values, 99))) if values.size else None
    out["jct_s"] = mine
    out["measure_window"] = {
        "first": window.first,
        "end": window.end,
        "completed": len(mine),
        "missing": len(ids) - len(mine),
        "last_window_finish_s": None if stop is None else _r(stop),
        "trace_jobs": len(jobs),
        "trace_last_arrival_s": _r(last_arrival),
        # arrivals ran out before the window finished: the load fell off, JCTs optimistic
        "trace_exhausted": stop is None or last_arrival < stop,
    }
    return out


def _r(x: float) -> float:
    return round(x, 4)
