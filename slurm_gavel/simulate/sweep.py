"""Average JCT against input job rate: one generated trace per rate, every policy on it.

Used by `slurm-gavel simulate --sweep-rates` and by benchmarks/. Rates are in jobs
per hour (Gavel's figures use the same unit); the trace at each rate uses the same
seed, so the job mix is identical and only the arrival gaps scale.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from slurm_gavel.domain.cluster_model import Node
from slurm_gavel.domain.throughputs import ThroughputTable
from slurm_gavel.errors import InputError
from slurm_gavel.simulate.engine import SimulationOptions
from slurm_gavel.simulate.generate import generate_trace
from slurm_gavel.simulate.parallel import Run
from slurm_gavel.simulate.window import Window, apply_window


@dataclass(frozen=True)
class SweepPoint:
    rate_jobs_per_hour: float
    policy: str
    summary: dict[str, Any]


def parse_rates(text: str) -> list[float]:
    rates = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        try:
            r = float(part)
        except ValueError:
            raise InputError(
                f"--sweep-rates: '{part}' is not a number; give jobs per hour, e.g. 0.4,0.8,1.6"
            ) from None
        if not r > 0:
            raise InputError(f"--sweep-rates: {part} must be > 0 jobs per hour")
        rates.append(r)
    if not rates:
        raise InputError("--sweep-rates: no rates given; e.g. --sweep-rates 0.4,0.8,1.6")
    return rates


def sweep_runs(
    rates: Iterable[float],
    policies: Sequence[str],
    n_jobs: int,
    nodes: Sequence[Node],
    table: ThroughputTable,
    options: SimulationOptions,
    *,
    multi_gpu: bool = False,
    size_first: bool = False,
    window: Window | None = None,
) -> list[tuple[float, Run]]:
    """The sweep's runs, each with its rate: every policy at each rate in turn (the
    order of the points; `simulate --submit` runs them as array tasks)."""
    rated: list[tuple[float, Run]] = []
    for rate in rates:
        jobs = generate_trace(
            n_jobs,
            3600.0 / rate,
            table,
            seed=options.seed,
            multi_gpu=multi_gpu,
            size_first=size_first,
        )
        opts = options
        if window is not None:
            opts = replace(options, stop_when_completed=window.ids(jobs))
        for policy in policies:
            rated.append((rate, Run(jobs, nodes, table, policy, opts)))
    return rated


def sweep_points(
    rated: Sequence[tuple[float, Run]],
    summaries: Sequence[dict[str, Any]],
    window: Window | None = None,
) -> list[SweepPoint]:
    """The points of the runs' summaries (in the runs' order)."""
    points: list[SweepPoint] = []
    for (rate, run), result in zip(rated, summaries, strict=True):
        summary = dict(result)
        if window is not None:
            summary = apply_window(summary, run.jobs, window)
        summary["rate_jobs_per_hour"] = rate
        points.append(SweepPoint(rate, run.policy, summary))
    return points
