"""``simulate --moldable``: GPU ranges for trace jobs that name none, and what the summary
says of the counts the round chose.

The rule (EXPERIMENTS.md): a job of n GPUs may run at n/2 .. 2n GPUs (at least 1, at
most the largest count the table has for its job type, never below n's own upper
bound; n .. 2n with ``--moldable-up-only``; up to K x n instead of 2n with
``--moldable-grow K``), restricted by the table to the counts it has rows for
(core/moldable/moldable.py). With
``--moldable-share F`` only a share F of the jobs get a range, drawn per job from
(--seed, job id), so the same seed picks the same jobs whatever the policy.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any

from slurm_gavel.core.moldable.moldable import trace_range
from slurm_gavel.domain.model import Job
from slurm_gavel.domain.throughputs import ThroughputTable


def _drawn(seed: int, job_id: str, share: float) -> bool:
    """True for a share of the jobs: a uniform draw from (seed, job id)."""
    if share >= 1.0:
        return True
    digest = hashlib.sha256(f"{seed}:{job_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 < share


def with_ranges(
    jobs: Iterable[Job],
    table: ThroughputTable,
    share: float = 1.0,
    seed: int = 0,
    shrink: bool = True,
    grow: int = 2,
) -> list[Job]:
    """The jobs, those without a range given n/2 .. 2n (module doc) where drawn."""
    out: list[Job] = []
    for j in jobs:
        if j.scale_range is not None or not _drawn(seed, j.id, share):
            out.append(j)
            continue
        sizes = table.scale_factors(j.job_type) if j.job_type in table.job_types else []
        largest = max(sizes, default=j.scale_factor)
        r = trace_range(j.scale_factor, largest, shrink, grow)
        out.append(j if r == (j.scale_factor, j.scale_factor) else replace(j, scale_range=r))
    return out


def summarise(jobs: Iterable[Job], counts_at_start: Mapping[int, int]) -> dict[str, Any] | None:
    """The summary's "moldable" entry: jobs with a range, (re)starts per GPU count and
    the mean count at a start, against the mean of their own scale factors; None when
    no job has a range."""
    molds = [j for j in jobs if j.scale_range is not None]
    if not molds:
        return None
    starts = sum(counts_at_start.values())
    gpus = sum(c * n for c, n in counts_at_start.items())
    return {
        "jobs": len(molds),
        "starts_by_count": {str(c): counts_at_start[c] for c in sorted(counts_at_start)},
        "mean_gpus_at_start": gpus / starts if starts else None,
        "mean_scale_factor": sum(j.scale_factor for j in molds) / len(molds),
    }


def summary_line(summary: Mapping[str, Any]) -> str | None:
    """One line for the text output, or None without moldable jobs."""
    m = summary.get("moldable")
    if not m:
        return None
    by = " ".join(f"{c}:{n}" for c, n in m["starts_by_count"].items()) or "none"
    mean = "-" if m["mean_gpus_at_start"] is None else f"{m['mean_gpus_at_start']:.2f}"
    return (
        f"{summary['policy']}: {m['jobs']} moldable jobs; (re)starts by GPU count {by}; "
        f"mean {mean} GPUs at a start (their scale factors: {m['mean_scale_factor']:.2f})\n"
    )
