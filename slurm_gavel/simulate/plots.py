"""PNG plots of simulation results (matplotlib, Agg backend: no display needed), each with
the data it shows beside it as CSV of the same stem (jct_cdf.png, jct_cdf.csv):

* jct_cdf: the CDF of job completion times, one line per policy;
* utilisation: the share of each GPU type's GPUs held over time, one policy;
* comparison: that utilisation for every policy, one panel each on shared axes (the
  same time range and y-limits), the trace and cluster in the title;
* jct_vs_rate: average JCT against input job rate (a sweep), one line per policy.

Time is in hours since the first arrival, so a curve ends at the policy's makespan.
"""

from __future__ import annotations

import csv
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
from matplotlib.figure import Figure

from slurm_gavel.simulate.collector import UtilisationTimeline
from slurm_gavel.simulate.sweep import SweepPoint

HOUR = 3600.0
BINS = 200


def jct_cdf(summaries: Sequence[Mapping[str, Any]], where: str, path: str | Path) -> Path:
    """One CDF line per summary (its `jct_s`); `where` names the trace and cluster."""
    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=120)
    rows: list[list[Any]] = []
    for s in summaries:
        jcts = sorted(s["jct_s"].items(), key=lambda kv: (kv[1], kv[0]))
        if not jcts:
            continue
        x = np.array([v for _, v in jcts], dtype=float) / HOUR
        y = np.arange(1, x.size + 1) / x.size
        ax.step(x, y, where="post", label=f"{s['policy']} (avg {x.mean():.1f} h)")
        rows += [[s["policy"], j, v, v / HOUR, f] for (j, v), f in zip(jcts, y, strict=True)]
    ax.set_xscale("log")
    ax.set_xlabel("job completion time (hours, log scale)")
    ax.set_ylabel("fraction of jobs")
    ax.set_ylim(0, 1.01)
    ax.set_title(f"JCT distribution\n{where}", fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(loc="lower right", fontsize=9)
    return save(fig, path, ["policy", "job", "jct_s", "jct_h", "fraction_of_jobs"], rows)


def binned(timeline: UtilisationTimeline, gpu_type: str, edges: np.ndarray) -> np.ndarray:
    """The mean of one type's step function over each bin [edges[i], edges[i+1]).

    Round-to-round alternation would otherwise paint a solid block. The integral of a
    step function is piecewise linear between its points, so interpolating it at the
    edges is exact; before the first and after the last point it is flat (idle).
    """
    xs, ys = timeline.steps(gpu_type)
    if len(xs) < 2:
        return np.zeros(edges.size - 1)
    x = np.asarray(xs, dtype=float)
    cum = np.concatenate([[0.0], np.cumsum(np.diff(x) * np.asarray(ys[:-1], dtype=float))])
    return np.diff(np.interp(edges, x, cum)) / np.diff(edges)


def _edges(t0: float, t1: float, bins: int) -> np.ndarray:
    return np.linspace(t0, max(t1, t0 + 1.0), bins + 1)


def _span(timeline: UtilisationTimeline) -> tuple[float, float]:
    return (timeline.times[0], timeline.ends[-1]) if timeline.times else (0.0, 0.0)


def _draw_utilisation(
    ax: Any, timeline: UtilisationTimeline, edges: np.ndarray, t0: float
) -> dict[str, np.ndarray]:
    mid = ((edges[:-1] + edges[1:]) / 2 - t0) / HOUR
    series = {}
    for gpu_type in timeline.by_type:
        series[gpu_type] = 100 * binned(timeline, gpu_type, edges)
        ax.plot(mid, series[gpu_type], label=gpu_type, linewidth=1.2)
    ax.grid(True, alpha=0.3)
    return series


def _utilisation_rows(
    edges: np.ndarray, t0: float, series: Mapping[str, np.ndarray], lead: Sequence[Any] = ()
) -> list[list[Any]]:
    hours = (edges - t0) / HOUR
    return [
        [*lead, hours[i], hours[i + 1], *(v[i] for v in series.values())]
        for i in range(edges.size - 1)
    ]


def utilisation(
    timeline: UtilisationTimeline, policy: str, where: str, path: str | Path, bins: int = BINS
) -> Path:
    fig, ax = plt.subplots(figsize=(8, 4.5), dpi=120)
    t0, t1 = _span(timeline)
    edges = _edges(t0, t1, bins)
    series = _draw_utilisation(ax, timeline, edges, t0)
    ax.set_xlim(0, (edges[-1] - t0) / HOUR)
    ax.set_xlabel(f"hours since the first arrival (mean over {bins} equal bins)")
    ax.set_ylabel("GPUs held (% of the type)")
    ax.set_ylim(0, 105)
    ax.set_title(f"GPU utilisation per type: {policy}\n{where}", fontsize=10)
    ax.legend(loc="upper right", fontsize=9)
    header = ["from_h", "to_h", *(f"{t}_pct" for t in series)]
    return save(fig, path, header, _utilisation_rows(edges, t0, series))


def comparison_figure(
    runs: Sequence[tuple[Mapping[str, Any], UtilisationTimeline]],
    where: str,
    bins: int = BINS,
) -> tuple[Figure, list[str], list[list[Any]]]:
    """One utilisation panel per (summary, timeline), all on the same axes: the same
    bins over the longest run, the same y-limits. Returns the figure and its data."""
    spans = [_span(tl) for _, tl in runs if tl.times]
    t0 = min((a for a, _ in spans), default=0.0)
    edges = _edges(t0, max((b for _, b in spans), default=t0), bins)
    fig, axes = plt.subplots(
        len(runs), 1, figsize=(8, 1.2 + 2.3 * len(runs)), dpi=120, sharex=True, sharey=True,
        squeeze=False,
    )  # fmt: skip
    rows: list[list[Any]] = []
    types: list[str] = []
    for ax, (s, tl) in zip(axes[:, 0], runs, strict=True):
        series = _draw_utilisation(ax, tl, edges, t0)
        types = types or list(series)
        rows += _utilisation_rows(edges, t0, series, [s["policy"]])
        jct = "-" if s["avg_jct_s"] is None else f"{s['avg_jct_s'] / HOUR:.2f} h"
        ax.set_title(
            f"{s['policy']}: avg JCT {jct}, makespan {s['makespan_s'] / HOUR:.2f} h, "
            f"utilisation {s['utilization']:.2f}",
            fontsize=9,
        )
        ax.set_ylabel("GPUs held (%)")
    axes[0, 0].set_xlim(0, (edges[-1] - t0) / HOUR)
    axes[0, 0].set_ylim(0, 105)
    axes[0, 0].legend(loc="upper right", fontsize=8)
    axes[-1, 0].set_xlabel(f"hours since the first arrival (mean over {bins} equal bins)")
    fig.suptitle(f"GPU utilisation per type by policy\n{where}", fontsize=10)
    return fig, ["policy", "from_h", "to_h", *(f"{t}_pct" for t in types)], rows


def comparison(
    runs: Sequence[tuple[Mapping[str, Any], UtilisationTimeline]], where: str, path: str | Path
) -> Path:
    fig, header, rows = comparison_figure(runs, where)
    return save(fig, path, header, rows)


def write_all(
    out: Path, where: str, runs: Sequence[tuple[Mapping[str, Any], UtilisationTimeline]]
) -> list[Path]:
    """`simulate --plot`: the JCT CDF, each policy's utilisation, and their comparison."""
    paths = [jct_cdf([s for s, _ in runs], where, out / "jct_cdf.png")]
    for s, tl in runs:
        paths.append(utilisation(tl, s["policy"], where, out / f"utilisation_{s['policy']}.png"))
    paths.append(comparison(runs, where, out / "comparison.png"))
    return paths


def jct_vs_rate(points: Sequence[SweepPoint], where: str, path: str | Path) -> Path:
    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=120)
    policies = list(dict.fromkeys(p.policy for p in points))
    rows: list[list[Any]] = []
    for policy in policies:
        mine = sorted((p for p in points if p.policy == policy), key=lambda p: p.rate_jobs_per_hour)
        xs = [p.rate_jobs_per_hour for p in mine]
        ys = [(p.summary["avg_jct_s"] or 0.0) / HOUR for p in mine]
        ax.plot(xs, ys, marker="o", label=policy)
        rows += [[policy, p.rate_jobs_per_hour, p.summary["avg_jct_s"]] for p in mine]
    ax.set_xlabel("input job rate (jobs/hour)")
    ax.set_ylabel("average JCT (hours)")
    ax.set_title(f"Average JCT vs load\n{where}", fontsize=10)
    ax.grid(True, alpha=0.3)
    ax.legend(loc="upper left", fontsize=9)
    return save(fig, path, ["policy", "rate_jobs_per_hour", "avg_jct_s"], rows)


def save(
    fig: Figure, path: str | Path, header: Sequence[str], rows: Iterable[Sequence[Any]]
) -> Path:
    """The figure as PNG at `path`, its data beside it as CSV (same stem)."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(p)
    plt.close(fig)
    with p.with_suffix(".csv").open("w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow([_cell(h) for h in header])
        w.writerows([_cell(v) for v in row] for row in rows)
    return p


def _cell(value: Any) -> Any:
    """A CSV cell; text that a spreadsheet would run as a formula (a job id or user name
    from a trace or sacct starting with = + - @) gets a leading quote, as OWASP advises."""
    if isinstance(value, str) and value[:1] in ("=", "+", "-", "@", "\t", "\r"):
        return "'" + value
    return value
