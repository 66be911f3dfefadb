"""Simulation metrics: JCTs, makespan, utilisation, restarts, finish-time fairness.

Memory stays flat in the number of completed jobs apart from one float per job
(its JCT, which the summary reports) and one per job for its rho: no job
objects are kept after completion. The utilisation timeline has one span per
round that ran (a jump over stable rounds is one span).

Finish-time fairness (Themis / Gavel): rho_j = JCT_j / T_iso_j, where T_iso_j is
the time the job would need on an equal 1/n share of the cluster, n being the
mean number of active jobs over its lifetime. Its share gives it
x = min(1, G / (n * s_j)) of its scale factor s_j, at the capacity-weighted
throughput P_j = sum_t T_jt cap_t / sum_t cap_t (the same P_j as
max_min_fairness). rho <= 1 means the job did at least as well as under its
fair share.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from slurm_gavel.backends.simulated import Completion
from slurm_gavel.domain.model import GpuType
from slurm_gavel.domain.throughputs import ThroughputTable


@dataclass
class UtilisationTimeline:
    """Mean fraction of each type's GPUs held by jobs over every round, as spans.

    Round i covers [times[i], ends[i]): a jump over stable rounds is one span (its
    placement does not change, so neither does its utilisation), and a gap between one
    span's end and the next one's start is an empty cluster waiting for an arrival. The
    means come from the cluster's busy GPU-seconds, so the timeline integrates to the
    summary's utilisation (a job that finishes mid-round frees its GPUs mid-round).
    """

    times: list[float] = field(default_factory=list)
    ends: list[float] = field(default_factory=list)
    by_type: dict[GpuType, list[float]] = field(default_factory=dict)

    def steps(self, gpu_type: GpuType) -> tuple[list[float], list[float]]:
        """One type's step function: ys[i] holds from xs[i] until xs[i+1]; the last
        point, the end of the last span, is 0 (as is any idle gap)."""
        xs: list[float] = []
        ys: list[float] = []
        for start, end, frac in zip(self.times, self.ends, self.by_type[gpu_type], strict=True):
            if end <= start:
                continue
            if xs and xs[-1] == start:  # this span continues the last one: no gap
                xs.pop()
                ys.pop()
            xs += [start, end]
            ys += [frac, 0.0]
        return xs, ys


@dataclass
class MetricsCollector:
    table: ThroughputTable
    capacity: Mapping[GpuType, int]
    jct: dict[str, float] = field(default_factory=dict)
    rho: list[float] = field(default_factory=list)
    restarts: int = 0
    first_arrival: float | None = None
    last_finish: float = 0.0
    rounds: int = 0
    reallocations: int = 0
    solve_seconds: float = 0.0
    mechanism_seconds: float = 0.0
    timeline: UtilisationTimeline = field(default_factory=UtilisationTimeline)
    # jobs' own rows (simulate/true_rows.py): their isolated time is on these
    true_rows: Mapping[str, Mapping[GpuType, float]] = field(default_factory=dict)
    _busy_at_start: dict[GpuType, float] = field(default_factory=dict, init=False, repr=False)

    def on_round(self, time: float, busy_gpu_seconds: Mapping[GpuType, float]) -> None:
        """A round starts at `time`; `busy_gpu_seconds` is the cluster's count so far."""
        self.rounds += 1
        self.timeline.times.append(time)
        self._busy_at_start = dict(busy_gpu_seconds)

    def on_round_end(self, time: float, busy_gpu_seconds: Mapping[GpuType, float]) -> None:
        """The round that started last (with the stable rounds it jumped over) ends."""
        tl = self.timeline
        tl.ends.append(time)
        length = time - tl.times[-1]
        for t, cap in self.capacity.items():
            busy = busy_gpu_seconds.get(t, 0.0) - self._busy_at_start.get(t, 0.0)
            frac = busy / (cap * length) if cap and length > 0 else 0.0
            tl.by_type.setdefault(t, []).append(frac)

    def on_completion(self, c: Completion) -> None:
        job = c.job
        jct = c.finish_time - job.arrival_time
        self.jct[job.id] = jct
        self.restarts += c.restarts
        if self.first_arrival is None or job.arrival_time < self.first_arrival:
            self.first_arrival = job.arrival_time
        self.last_finish = max(self.last_finish, c.finish_time)
        iso = self.isolated_time(
            job.job_type, job.scale_factor, job.total_steps, c.mean_active_jobs,
            self.true_rows.get(job.id),
        )  # fmt: skip
        if iso > 0:
            self.rho.append(jct / iso)

    def isolated_time(
        self, job_type: str, sf: int, steps: float, n: float, row: Mapping | None = None
    ) -> float:
        gpus = sum(self.capacity.values())
        if gpus == 0:
            return 0.0
        if row is None:
            row = self.table.row(job_type, sf)
        p = sum(row.get(t, 0.0) * cap for t, cap in self.capacity.items()) / gpus
        share = min(1.0, gpus / (max(1.0, n) * sf))
        rate = p * share
        return steps / rate if rate > 0 else 0.0

    def summary(
        self,
        policy: str,
        busy_gpu_seconds: Mapping[GpuType, float],
        wall_seconds: float | None,
        unfinished: int = 0,
        restart_gpu_seconds: float = 0.0,
    ) -> dict[str, Any]:
        """The summary; restart_gpu_seconds: GPU time restarting jobs held without
        progress (restoring a checkpoint), the backend's count."""
        jcts = np.array(list(self.jct.values()), dtype=float)
        start = self.first_arrival or 0.0
        makespan = max(0.0, self.last_finish - start)
        total_gpus = sum(self.capacity.values())
        busy = sum(busy_gpu_seconds.values())
        util = busy / (total_gpus * makespan) if total_gpus and makespan > 0 else 0.0
        util_by_type = {
            t: _r(busy_gpu_seconds.get(t, 0.0) / (cap * makespan)) if cap and makespan else 0.0
            for t, cap in self.capacity.items()
        }
        rho = np.array(self.rho, dtype=float)

        def pct(a: np.ndarray, q: float) -> float | None:
            return _r(float(np.percentile(a, q))) if a.size else None

        return {
            "policy": policy,
            "jobs": len(self.jct),
            "avg_jct_s": _r(float(jcts.mean())) if jcts.size else None,
            "p50_jct_s": pct(jcts, 50),
            "p99_jct_s": pct(jcts, 99),
            "makespan_s": _r(makespan),
            "utilization": _r(util),
            "preemptions": self.restarts,
            "restarts_per_job": _r(self.restarts / len(self.jct)) if self.jct else None,
            "restart_gpu_hours": _r(restart_gpu_seconds / 3600.0),
            "wall_seconds": None if wall_seconds is None else round(wall_seconds, 3),
            "unfinished_jobs": unfinished,
            "rounds": self.rounds,
            "reallocations": self.reallocations,
            "solve_seconds": None if wall_seconds is None else round(self.solve_seconds, 3),
            "utilization_by_type": util_by_type,
            "finish_time_fairness": {
                "mean_rho": _r(float(rho.mean())) if rho.size else None,
                "p50_rho": pct(rho, 50),
                "p99_rho": pct(rho, 99),
                "max_rho": _r(float(rho.max())) if rho.size else None,
                "fraction_rho_above_1": _r(float((rho > 1).mean())) if rho.size else None,
            },
            "jct_s": {j: _r(v) for j, v in self.jct.items()},
        }


def _r(x: float) -> float:
    """Round for the summary: stable text, no float noise in the last digits."""
    return round(x, 4)
