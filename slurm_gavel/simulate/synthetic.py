"""Seeded synthetic allocation problems, for benchmarks and property tests.

Jobs draw their type uniformly from a throughput table and their scale factor
from the Philly mix Gavel uses (70% 1 GPU, 10% 2, 15% 4, 5% 8); GPU counts are
given per type. Pure function of its arguments: the same seed gives the same
problem.
"""

from __future__ import annotations

import numpy as np

from slurm_gavel.domain.model import Job, Problem
from slurm_gavel.domain.throughputs import ThroughputTable, load_table

PHILLY_MIX: tuple[tuple[int, float], ...] = ((1, 0.70), (2, 0.10), (4, 0.15), (8, 0.05))


def random_problem(
    n_jobs: int,
    gpus_per_type: int | dict[str, int],
    *,
    seed: int = 0,
    multi_gpu: bool = True,
    with_pairs: bool = False,
    weights: tuple[float, ...] = (1.0,),
    accounts: dict[str, float] | None = None,
    table: ThroughputTable | None = None,
) -> Problem:
    table = table or load_table()
    if isinstance(gpus_per_type, int):
        cluster = {t: gpus_per_type for t in table.gpu_types}
    else:
        cluster = dict(gpus_per_type)
    types = list(cluster)
    rng = np.random.default_rng(seed)
    sizes = np.array([sf for sf, _ in PHILLY_MIX])
    probs = np.array([p for _, p in PHILLY_MIX])
    max_cap = max(cluster.values())
    account_names = list(accounts or {})
    jobs = []
    for i in range(n_jobs):
        while True:
            job_type = table.job_types[int(rng.integers(len(table.job_types)))]
            sf = int(rng.choice(sizes, p=probs)) if multi_gpu else 1
            sf = min(sf, max_cap)
            if table.has(job_type, sf) and any(
                table.throughput(job_type, sf, t) > 0 for t in types
            ):
                break
        job = Job(
            id=str(i),
            job_type=job_type,
            scale_factor=sf,
            priority_weight=float(weights[int(rng.integers(len(weights)))]),
            total_steps=float(rng.integers(1_000, 1_000_000)),
            account=account_names[i % len(account_names)] if account_names else None,
        )
        jobs.append(table.problem_job(job, types, time_since_start=float(rng.uniform(0, 36_000))))
    pairs = (
        table.pair_throughputs([(j.job_type, j.scale_factor) for j in jobs], types)
        if with_pairs
        else []
    )
    return Problem(cluster, tuple(jobs), tuple(pairs), dict(accounts or {}))
