"""Synthetic traces like Gavel's generator (scripts/utils/generate_trace.py).

* arrivals: Poisson process, exponential inter-arrival gaps with the given mean
  (the first job arrives at 0);
* job type: uniform over the table's job types;
* duration: 10^U(1.5, 3) minutes with probability 0.8, else 10^U(3, 4) minutes,
  turned into steps with the job's throughput on V100 (or on the fastest type
  the table has for it when there is no V100 column);
* scale factor: 1, or with multi_gpu the Philly mix 70/10/15/5 % for 1/2/4/8 GPUs
  for job types the table has multi-GPU figures for (Gavel's "distributed" jobs;
  the others stay at 1); a size the type lacks is redrawn. This is Gavel's
  `generate_job(always_generate_scale_factor=False)` (its generate_trace.py);
* size_first (with multi_gpu): the size first from the Philly mix, then the type
  uniformly among those the table has that size for: Gavel's `generate_job`
  default (`always_generate_scale_factor=True`), which its simulator uses for
  continuous traces. More multi-GPU jobs (~30 % instead of ~22 % with the
  shipped table) and ~1.9 GPUs per job instead of ~1.65. Sizes no job type has
  are left out of the mix;
* optional: priority weight 5 for 20 % of jobs, an SLO of 1.2x/2x/10x the
  duration, an account drawn uniformly from `accounts`.

Pure function of its arguments: the same seed gives the same trace.
"""

from __future__ import annotations

import numpy as np

from slurm_gavel.domain.model import Job
from slurm_gavel.domain.throughputs import ThroughputTable
from slurm_gavel.errors import InputError
from slurm_gavel.simulate.synthetic import PHILLY_MIX

REFERENCE_GPU = "v100"


def job_duration_minutes(rng: np.random.Generator) -> float:
    if rng.random() < 0.8:
        return float(10 ** rng.uniform(1.5, 3))
    return float(10 ** rng.uniform(3, 4))


def reference_throughput(table: ThroughputTable, job_type: str, scale_factor: int) -> float:
    row = table.row(job_type, scale_factor)
    if row.get(REFERENCE_GPU, 0.0) > 0:
        return row[REFERENCE_GPU]
    return max(row.values(), default=0.0)


def _type_first(
    rng: np.random.Generator,
    table: ThroughputTable,
    job_types: list[str],
    multi_gpu: bool,
    sizes: list[int],
    probs: np.ndarray,
) -> tuple[str, int]:
    """The type uniformly; only types the table has multi-GPU figures for ("distributed"
    in Gavel's job table) then draw a size from the mix, redrawing a size they lack."""
    job_type = job_types[int(rng.integers(len(job_types)))]
    sf = 1
    if multi_gpu and any(s > 1 for s in table.scale_factors(job_type)):
        while True:
            sf = int(rng.choice(sizes, p=probs))
            if table.has(job_type, sf) and reference_throughput(table, job_type, sf) > 0:
                break
    return job_type, sf


def generate_trace(
    n_jobs: int,
    interarrival_s: float,
    table: ThroughputTable,
    *,
    seed: int = 0,
    multi_gpu: bool = False,
    priorities: bool = False,
    slos: bool = False,
    accounts: tuple[str, ...] = (),
    max_scale_factor: int | None = None,
    size_first: bool = False,
) -> list[Job]:
    if n_jobs < 1:
        raise InputError(f"--generate {n_jobs}: give at least 1 job")
    if not interarrival_s > 0:
        raise InputError(f"--interarrival {interarrival_s}: must be > 0 seconds")
    rng = np.random.default_rng(seed)
    sizes = [sf for sf, _ in PHILLY_MIX if max_scale_factor is None or sf <= max_scale_factor]
    probs = np.array([p for sf, p in PHILLY_MIX if sf in sizes])
    probs = probs / probs.sum()
    job_types = table.job_types
    if multi_gpu and size_first:
        # per size, the types that can run at it (in table order: deterministic)
        runs_at = {
            sf: [
                jt
                for jt in job_types
                if table.has(jt, sf) and reference_throughput(table, jt, sf) > 0
            ]
            for sf in sizes
        }
        keep = [i for i, sf in enumerate(sizes) if runs_at[sf]]
        if not keep:
            raise InputError(
                f"--size-first: the throughput table has no job type at any of the sizes "
                f"{sizes}; add throughputs for them or drop --size-first"
            )
        sizes = [sizes[i] for i in keep]
        probs = probs[keep] / probs[keep].sum()
    jobs: list[Job] = []
    t = 0.0
    for i in range(n_jobs):
        if i > 0:
            t += float(rng.exponential(interarrival_s))
        if multi_gpu and size_first:
            sf = int(rng.choice(sizes, p=probs))
            job_type = runs_at[sf][int(rng.integers(len(runs_at[sf])))]
        else:
            job_type, sf = _type_first(rng, table, job_types, multi_gpu, sizes, probs)
        minutes = job_duration_minutes(rng)
        steps = max(1, round(minutes * 60 * reference_throughput(table, job_type, sf)))
        weight = 1.0
        if priorities and rng.random() < 0.2:
            weight = 5.0
        slo = None
        if slos:
            slo = float(rng.choice([1.2, 2.0, 10.0])) * minutes * 60
        account = accounts[int(rng.integers(len(accounts)))] if accounts else None
        jobs.append(
            Job(
                id=str(i),
                job_type=job_type,
                scale_factor=sf,
                priority_weight=weight,
                total_steps=float(steps),
                arrival_time=round(t, 3),
                account=account,
                slo=slo,
            )
        )
    return jobs
