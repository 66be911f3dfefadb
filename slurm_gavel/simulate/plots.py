"""PNG plots of simulation results (matplotlib, Agg backend: no display needed).

* jct_cdf: the CDF of job completion times, one line per policy;
* utilisation: the fraction of each GPU type's GPUs allocated over time;
* jct_vs_rate: average JCT against input job rate (a sweep), one line per policy.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

from slurm_gavel.simulate.metrics import UtilisationTimeline
from slurm_gavel.simulate.sweep import SweepPoint

HOUR = 3600.0


def jct_cdf(jcts: Mapping[str, Sequence[float]], path: str | Path) -> Path:
    """`jcts`: policy -> JCTs in seconds."""
    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=120)
    for policy, values in jcts.items():
        x = np.sort(np.asarray(values, dtype=float)) / HOUR
        if x.size == 0:
            continue
        y = np.arange(1, x.size + 1) / x.size
        ax.step(x, y, where="post", label=f"{policy} (avg {x.mean():.1f} h)")
    ax.set_xscale("log")
    ax.set_xlabel("job completion time (hours, log scale)")
    ax.set_ylabel("fraction of jobs")
    ax.set_ylim(0, 1.01)
    ax.set_title("JCT distribution")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(loc="lower right", fontsize=9)
    return _save(fig, path)


def _binned(times: np.ndarray, values: np.ndarray, bins: int) -> tuple[np.ndarray, np.ndarray]:
    """Time-weighted mean of a step function (value holds until the next time) per bin:
    round-to-round alternation would otherwise paint a solid block."""
    if times.size < 2:
        return times, values
    edges = np.linspace(times[0], times[-1], bins + 1)
    # cumulative integral of the step function at every edge
    seg = np.diff(times) * values[:-1]
    cum = np.concatenate([[0.0], np.cumsum(seg)])
    idx = np.clip(np.searchsorted(times, edges, side="right") - 1, 0, times.size - 1)
    at_edges = cum[idx] + (edges - times[idx]) * values[idx]
    at_edges[-1] = cum[-1]
    means = np.diff(at_edges) / np.diff(edges)
    return (edges[:-1] + edges[1:]) / 2, means


def utilisation(
    timeline: UtilisationTimeline, policy: str, path: str | Path, bins: int = 200
) -> Path:
    fig, ax = plt.subplots(figsize=(8, 4.5), dpi=120)
    for gpu_type in timeline.by_type:
        xs, ys = timeline.steps(gpu_type)
        x, y = _binned(np.asarray(xs, dtype=float), np.asarray(ys, dtype=float), bins)
        ax.plot(x / HOUR, 100 * y, label=gpu_type, linewidth=1.2)
    ax.set_xlabel(f"simulated time (hours; mean over {bins} equal bins)")
    ax.set_ylabel("GPUs allocated (% of the type)")
    ax.set_ylim(0, 105)
    ax.set_title(f"GPU utilisation per type: {policy}")
    ax.grid(True, alpha=0.3)
    ax.legend(loc="upper right", fontsize=9)
    return _save(fig, path)


def jct_vs_rate(points: Sequence[SweepPoint], path: str | Path) -> Path:
    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=120)
    policies = list(dict.fromkeys(p.policy for p in points))
    for policy in policies:
        mine = sorted((p for p in points if p.policy == policy), key=lambda p: p.rate_jobs_per_hour)
        xs = [p.rate_jobs_per_hour for p in mine]
        ys = [(p.summary["avg_jct_s"] or 0.0) / HOUR for p in mine]
        ax.plot(xs, ys, marker="o", label=policy)
    ax.set_xlabel("input job rate (jobs/hour)")
    ax.set_ylabel("average JCT (hours)")
    ax.set_title("Average JCT vs load")
    ax.grid(True, alpha=0.3)
    ax.legend(loc="upper left", fontsize=9)
    return _save(fig, path)


def _save(fig: plt.Figure, path: str | Path) -> Path:
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(p)
    plt.close(fig)
    return p
