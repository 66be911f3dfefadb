"""Paired rates the daemon derives itself, for jobs that do not name their partner.

A real training job using slurm_gavel.job does not know which job shares its GPU, so
its report has ``partner: null`` and its ``steps_per_s`` may mix time alone and time
shared. The daemon knows the pairing (Slurm's shard allocation, checked each round), so
it measures the shared rate from two of the job's own reports instead:

    rate = (steps_2 - steps_1) / (updated_2 - updated_1)

and only over a window in which it *saw* the pair together: a job's allocation is fixed
for a run, so when both jobs are on the same runs (Slurm's restart counts unchanged) at
every round from ``since`` to now, they shared the GPU all that time. Both reports'
``updated`` must lie in [since, now], the first round that saw them together and the
current one (a round on either side); both are of the current run (the caller checks
each report's ``restart_count`` against Slurm's), in order, ``run_steps`` moving with
``steps``, steps increasing, at least MIN_WINDOW_S apart. A report breaking this (a
rewind, ``updated`` going backwards) starts a new window; so does any change of the
pairing (a split, a restart of either job). The result is one vote like any other
(daemon/progress_learning.py: bounds, quorum of users, step and drift caps).

Compute nodes' clocks are taken to agree with the daemon's (NTP), as for the report's
age; a node running ahead shortens the window's head by its skew at most.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from slurm_gavel.domain.cluster_model import JobState, ObservedJob

MIN_WINDOW_S = 30.0  # shorter windows are mostly the report interval's jitter

# What must stay the same for "still together": the partner, both jobs' runs, the GPUs.
PairingKey = tuple[str, int, int, str, tuple[Any, ...]]


@dataclass(frozen=True)
class Mark:
    """A report's position: what a window is measured between."""

    steps: float
    run_steps: float | None
    updated: float


@dataclass(frozen=True)
class _Together:
    key: PairingKey
    since: float  # the first round (daemon's clock) that saw this pairing, unbroken since


@dataclass
class PairWindows:
    min_window_s: float = MIN_WINDOW_S
    _together: dict[str, _Together] = field(default_factory=dict)
    # Each window's first and latest report: a new one must follow on from the latest.
    _marks: dict[str, tuple[Mark, Mark]] = field(default_factory=dict)

    def observe(self, now: float, pairings: dict[str, PairingKey]) -> None:
        """This round's checked pairings, by job: a job missing or with another key
        than last round starts over (its window is forgotten)."""
        together: dict[str, _Together] = {}
        for job, key in pairings.items():
            old = self._together.get(job)
            if old is not None and old.key == key:
                together[job] = old
            else:
                together[job] = _Together(key, now)
                self._marks.pop(job, None)
        self._marks = {j: m for j, m in self._marks.items() if j in together}
        self._together = together

    def rate(self, job: str, mark: Mark, now: float) -> float | None:
        """The job's steps/s over its window ending at ``mark``, or None (no window yet,
        too short, or ``mark`` outside the time the pair was seen together)."""
        span = self._together.get(job)
        if span is None or not span.since <= mark.updated <= now:
            return None
        first, last = self._marks.get(job, (mark, mark))
        if not _same_run_onwards(last, mark):
            first = mark
        self._marks[job] = (first, mark)
        seconds = mark.updated - first.updated
        if seconds < self.min_window_s or mark.steps <= first.steps:
            return None
        return (mark.steps - first.steps) / seconds


def _same_run_onwards(a: Mark, b: Mark) -> bool:
    """``b`` is not before ``a`` and its step counters agree (the run is the pairing's:
    PairingKey)."""
    if b.updated < a.updated or b.steps < a.steps:
        return False
    if a.run_steps is None or b.run_steps is None:
        return a.run_steps is None and b.run_steps is None
    return math.isclose(b.run_steps - a.run_steps, b.steps - a.steps, rel_tol=1e-9, abs_tol=0.5)


def mate_of(o: ObservedJob, jobs: Mapping[str, ObservedJob]) -> ObservedJob | None:
    """The managed job (one of ``jobs``) Slurm shows sharing ``o``'s GPUs, when both run
    there, it names ``o`` back and has its scale factor; else None."""
    mate = jobs.get(o.partner or "")
    if (
        mate is None
        or o.state is not JobState.RUNNING
        or mate.state is not JobState.RUNNING
        or mate.partner != o.job.id
        or (mate.gpu_type, mate.nodes) != (o.gpu_type, o.nodes)
        or mate.job.scale_factor != o.job.scale_factor
    ):
        return None
    return mate


def pairings(jobs: Mapping[str, ObservedJob]) -> dict[str, PairingKey]:
    """Each job sharing with a checked partner (:func:`mate_of`), keyed by what must not
    change while they stay together: the partner, the runs of both, the GPUs."""
    out: dict[str, PairingKey] = {}
    for o in jobs.values():
        mate = mate_of(o, jobs)
        if mate is not None:
            out[o.job.id] = (mate.job.id, o.restarts, mate.restarts, str(o.gpu_type), o.nodes)
    return out
