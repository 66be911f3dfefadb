"""How fast a simulated job runs on a placement: SimulatedCluster's rate model.

A job without a true row runs at the throughput table's figure for its placement
(alone on consolidated GPUs, spread over more nodes than necessary = the table's
unconsolidated figure, sharing GPUs with a partner = the pair figure). A job with a
true row (steps/s per GPU type, the trace's ``throughput_<type>`` columns) runs at
that rate alone; spread or shared it runs at its type's figure for that placement
scaled by its own/its type's alone rate (the table knows how placement slows a
model, the trace only how fast this job is). A moldable job at another count than
its scale factor runs at its type's rate at that count over the one at its scale
factor (linear where the table lacks one of the two).

The model owns its memo tables (every running job's rate is set every round); the
arithmetic is the one SimulatedCluster always did, so results are unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from slurm_gavel.domain.cluster_model import JobPlacement
from slurm_gavel.domain.model import GpuType, Job, JobId
from slurm_gavel.domain.throughputs import ThroughputTable


class RateModel:
    """Steps/s of a job on a placement, from the table and the jobs' true rows."""

    def __init__(
        self, table: ThroughputTable, true_rows: Mapping[JobId, Mapping[GpuType, float]]
    ) -> None:
        self.table = table
        self.true_rows = true_rows
        # (job id, GPU type, consolidated, GPUs) -> steps/s alone, for jobs with a true row
        self._own: dict[tuple[JobId, GpuType, bool, int], float] = {}
        # steps/s by (job type, GPUs, GPU type, consolidated): the table's lookup
        self._table: dict[tuple[str, int, GpuType, bool], float] = {}

    def rate(self, job: Job, p: JobPlacement, partner: Job | None) -> float:
        """The job's steps/s on ``p``; ``partner``: the job sharing its GPUs, None when
        it has them to itself (no partner, or the partner is not running)."""
        if job.id in self.true_rows:
            return self._own_rate(job, p, partner)
        if partner is not None:
            pair = self.table.pair(job.job_type, partner.job_type, p.gpus, p.gpu_type)
            return pair[0] if pair is not None else 0.0
        # at the placement's count: the job's scale factor, or a moldable job's choice
        key = (job.job_type, p.gpus, p.gpu_type, p.consolidated)
        cached = self._table.get(key)
        if cached is None:
            cached = self._table[key] = self.table.throughput(
                job.job_type, p.gpus, p.gpu_type, consolidated=p.consolidated
            )
        return cached

    def _own_rate(self, job: Job, p: JobPlacement, partner: Job | None) -> float:
        """A job with a true row: its own alone rate, times its type's slowdown for a
        spread or shared placement (module doc)."""
        t = p.gpu_type
        key = (job.id, t, p.consolidated, p.gpus)
        alone = self._own.get(key)
        if alone is None:
            alone = self.true_rows[job.id].get(t, 0.0)
            if p.gpus != job.scale_factor:  # a moldable job at another count
                alone *= self._count_ratio(job, p.gpus, t)
                job = replace(job, scale_factor=p.gpus)
            if not p.consolidated and job.scale_factor > 1:
                alone *= self._type_ratio(job, t, consolidated=False)
            self._own[key] = alone
        if partner is None:
            return alone
        if p.gpus != job.scale_factor:
            job = replace(job, scale_factor=p.gpus)
        pair = None
        if self.table.has(job.job_type, job.scale_factor):
            pair = self.table.pair(job.job_type, partner.job_type, job.scale_factor, t)
        if pair is None:
            return 0.0
        return alone * self._type_ratio(job, t, consolidated=p.consolidated, shared=pair[0])

    def _count_ratio(self, job: Job, count: int, t: GpuType) -> float:
        """A job with a true row at another count: its type's rate at that count over
        its rate at its own scale factor; linear in the count where the table has no
        figure for one of the two."""
        linear = count / job.scale_factor
        sf = job.scale_factor
        if not (self.table.has(job.job_type, count) and self.table.has(job.job_type, sf)):
            return linear
        base = self.table.throughput(job.job_type, sf, t)
        return self.table.throughput(job.job_type, count, t) / base if base > 0 else linear

    def _type_ratio(
        self, job: Job, t: GpuType, *, consolidated: bool, shared: float | None = None
    ) -> float:
        """The type's rate on this placement over its rate alone and consolidated (1
        when the table has no figure for the job's type)."""
        if not self.table.has(job.job_type, job.scale_factor):
            return 1.0
        base = self.table.throughput(job.job_type, job.scale_factor, t)
        if base <= 0:
            return 1.0
        if shared is not None:
            return shared / base
        here = self.table.throughput(job.job_type, job.scale_factor, t, consolidated=consolidated)
        return here / base


__all__ = ["RateModel"]
