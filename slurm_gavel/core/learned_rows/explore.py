"""Exploration: a new job's GPU types it has not been measured on look
better than its prior says, for a bounded time, so the policy places it there early and
its row gets measured there, rather than whenever the rotation happens to.

While a job is *exploring*, :func:`optimistic` multiplies its unmeasured cells by
``bonus``. A job stops exploring, for good, once it has used its budget: ``max_restarts``
restarts or ``max_gpu_seconds`` of GPU time (its received seconds times its GPUs), or
once every cluster type is measured (its row has no unmeasured cell left, so the bonus
changes nothing). The policy's own allocation and rotation then do the exploring; the
budget bounds what the optimism can cost a job that is measured and found slow.

What it costs and gains is measured in benchmarks/bench_explore.py (EXPERIMENTS.md).
Pure; job_rows.py applies it, the daemon's config (``learning:``) sets it.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping
from dataclasses import dataclass

from slurm_gavel.domain.model import GpuType


@dataclass(frozen=True)
class Exploration:
    bonus: float = 2.0  # unmeasured cells look this much faster while exploring
    max_restarts: int = 2  # a job explores until it has been restarted this often
    max_gpu_seconds: float = 3600.0  # or has had this much GPU time

    def __post_init__(self) -> None:
        if not (math.isfinite(self.bonus) and self.bonus >= 1.0):
            raise ValueError(f"bonus must be a finite number >= 1, not {self.bonus!r}")
        if not (math.isfinite(self.max_gpu_seconds) and self.max_gpu_seconds >= 0):
            raise ValueError(f"max_gpu_seconds must be >= 0, not {self.max_gpu_seconds!r}")
        if self.max_restarts < 0:
            raise ValueError(f"max_restarts must be >= 0, not {self.max_restarts!r}")

    def within_budget(self, restarts: int, received_s: Mapping[GpuType, float], gpus: int) -> bool:
        spent = sum(received_s.values()) * gpus
        return restarts < self.max_restarts and spent < self.max_gpu_seconds


def optimistic(
    row: Mapping[GpuType, float], measured: Collection[GpuType], bonus: float
) -> dict[GpuType, float]:
    """The row with every cell not in ``measured`` times ``bonus``."""
    return {t: v if t in measured else v * bonus for t, v in row.items()}
