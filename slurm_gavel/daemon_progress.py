"""Progress flowing back: the job-side spool read into the snapshot and the accounting.

Jobs that use slurm_gavel.job write ``<progress_dir>/<job id>.json`` (format in
slurm_gavel/job/progress.py). Each round the daemon:

* sets ``steps_done`` of every managed job that has a report (the scheduler then
  uses it for steps remaining instead of its own estimate);
* sets ``measured_throughput`` of a running job when the report comes from its
  current run (same restart count) and is recent, and folds that rate into a
  running mean per (job type, scale factor, GPU type): the throughput
  observations persisted in the state file and handed to the estimator.

A missing, stale or foreign report changes nothing: progress is an optional
refinement, never a condition for scheduling. Jobs without reports get their steps
estimated from the time they received (:func:`estimate_steps`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from slurm_gavel.backends.base import ClusterSnapshot, JobState, ObservedJob
from slurm_gavel.errors import InputError
from slurm_gavel.job.progress import read_report
from slurm_gavel.throughputs import ThroughputTable


@dataclass
class Observation:
    """Mean measured steps/s of one (job type, scale factor, GPU type)."""

    job_type: str
    scale_factor: int
    gpu_type: str
    steps_per_s: float
    samples: int

    def key(self) -> str:
        return f"{self.job_type}|{self.scale_factor}|{self.gpu_type}"


@dataclass
class ProgressTracker:
    folder: Path
    # A report older than this is not trusted as the job's current rate.
    max_age_s: float = 600.0
    observations: dict[str, Observation] = field(default_factory=dict)
    # job id -> `updated` of the last report folded in (each report counts once)
    _seen: dict[str, float] = field(default_factory=dict)
    changed: bool = False  # observations changed since the caller last looked

    def merge(self, snap: ClusterSnapshot) -> ClusterSnapshot:
        """The snapshot with steps_done / measured_throughput filled from the spool."""
        jobs: list[ObservedJob] = []
        alive: set[str] = set()
        for o in snap.jobs:
            if o.state is JobState.DONE:
                jobs.append(o)
                continue
            alive.add(o.job.id)
            report = read_report(self.folder / f"{o.job.id}.json")
            jobs.append(o if report is None else self._apply(o, report, snap.time))
        for gone in [j for j in self._seen if j not in alive]:
            del self._seen[gone]
        return replace(snap, jobs=tuple(jobs))

    def _apply(self, o: ObservedJob, r: dict[str, Any], now: float) -> ObservedJob:
        if str(r.get("job_id")) != o.job.id:
            return o  # a stale file from a recycled job id, or a copy
        steps = _number(r.get("steps"))
        out = o if steps is None or o.steps_done is not None else replace(o, steps_done=steps)
        rate = _number(r.get("steps_per_s"))
        updated = _number(r.get("updated")) or 0.0
        current_run = r.get("restart_count") == o.restarts and r.get("state") == "running"
        if (
            o.state is JobState.RUNNING
            and o.gpu_type is not None
            and rate is not None
            and rate > 0
            and current_run
            and now - updated <= self.max_age_s
        ):
            out = replace(out, measured_throughput=rate)
            if self._seen.get(o.job.id) != updated:
                self._seen[o.job.id] = updated
                self._fold(o.job.job_type, o.job.scale_factor, o.gpu_type, rate)
        return out

    def _fold(self, job_type: str, scale_factor: int, gpu: str, rate: float) -> None:
        key = f"{job_type}|{scale_factor}|{gpu}"
        obs = self.observations.get(key)
        if obs is None:
            self.observations[key] = Observation(job_type, scale_factor, gpu, rate, 1)
        else:
            obs.samples += 1
            obs.steps_per_s += (rate - obs.steps_per_s) / obs.samples
        self.changed = True

    # ---- persistence (inside the daemon's state file) -------------------------------

    def to_json(self) -> dict[str, Any]:
        return {
            "observations": [vars(o) for o in self.observations.values()],
            "seen": dict(self._seen),
        }

    def load(self, d: dict[str, Any] | None) -> None:
        if not d:
            return
        for raw in d.get("observations", []):
            obs = Observation(
                str(raw["job_type"]),
                int(raw["scale_factor"]),
                str(raw["gpu_type"]),
                float(raw["steps_per_s"]),
                int(raw["samples"]),
            )
            self.observations[obs.key()] = obs
        self._seen = {str(k): float(v) for k, v in (d.get("seen") or {}).items()}
        self.changed = bool(self.observations)


def _number(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, int | float) or v != v:
        return None
    return float(v)


def estimate_steps(
    snap: ClusterSnapshot,
    received_s: Mapping[str, Mapping[str, float]],
    restarts: Mapping[str, int],
    table: ThroughputTable,
    overhead_s: float,
) -> ClusterSnapshot:
    """Steps done of jobs that report none, from the time they received on each type.

    steps ~ sum over types of (seconds received x table steps/s), less one
    `overhead_s` of the job's fastest rate per restart (checkpoint + restore make no
    progress). Finish-time policies need some steps-remaining figure; this is the
    table's best guess, replaced by the job's own count as soon as it reports one.
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
        steps -= overhead_s * restarts.get(o.job.id, o.restarts) * max(row.values(), default=0)
        cap = o.job.total_steps if o.job.total_steps > 0 else math.inf
        jobs.append(replace(o, steps_done=min(max(0.0, steps), cap)))
    return replace(snap, jobs=tuple(jobs))
