"""gandiva: Gandiva's random-pairing baseline (Gavel's GandivaPolicy), as a pure function.

As in Gavel:

* If the jobs' GPU demand fits the cluster (sum_j s_j <= sum_t cap_t), no packing:
  every job gets an equal share, exactly as the isolated policy.
* Otherwise jobs are paired at random: n attempts, each draws two unpaired jobs;
  they pair when their scale factors match (here also: their types have a
  pair_throughputs entry, since without one the pair's throughput is unknown).
  A pair whose normalised packed throughput sum_t (r_a/T_a + r_b/T_b) is below 1,
  or where either job would get 0 on some type, is split again.
* Every combination (pair or single job) then gets an equal 1/m share of every
  type, x_t = cap_t / (m s), each row scaled down to sum to at most 1.

Differences, on purpose: Gavel keeps pairs across rounds in mutable policy state
and splits bad pairs one round later; this function is stateless (the caller
passes the same seed for the same pairing) and splits bad pairs at once. The sum
for the packed-throughput check runs over the types the pair may use (entry
present, both jobs can run there alone) rather than all types. Time on types a
combination cannot use is dropped (see isolated.py). Deterministic for a given
options.seed and job order. Allocation.objective is None.
"""

from __future__ import annotations

import random

import numpy as np

from slurm_gavel.domain.model import Allocation, PairShare, Problem, ProblemJob, pair_lookup
from slurm_gavel.policies import PolicyOptions
from slurm_gavel.policies.isolated import allocate as isolated_allocate
from slurm_gavel.policies.solvers.mm_pairs import PairTable, pair_rates

NAME = "gandiva"


def allocate(problem: Problem, options: PolicyOptions) -> Allocation:
    demand = sum(j.scale_factor for j in problem.jobs)
    if demand <= sum(problem.cluster.values()):
        alloc = isolated_allocate(problem, options)
        alloc.policy = NAME
        return alloc
    table = pair_lookup(problem)
    pairs, singles = random_pairs(problem, table, options.seed)
    types = problem.gpu_types
    cap = np.array([float(problem.cluster[t]) for t in types])
    m = len(pairs) + len(singles)

    def share(scale: int, usable: np.ndarray) -> dict[str, float]:
        x = np.where(usable, cap / (m * scale), 0.0)
        x = x / max(float(x.sum()), 1.0)
        return dict(zip(types, map(float, x), strict=True))

    fractions = {j.id: dict.fromkeys(types, 0.0) for j in problem.jobs}
    for j in singles:
        fractions[j.id] = share(j.scale_factor, _usable(j, types, cap))
    shares = []
    for a, b in pairs:
        usable = _pair_usable(table, a, b, types, cap)
        shares.append(PairShare((a.id, b.id), share(a.scale_factor, usable)))
    return Allocation(NAME, fractions, shares)


def random_pairs(
    problem: Problem, table: PairTable, seed: int
) -> tuple[list[tuple[ProblemJob, ProblemJob]], list[ProblemJob]]:
    """Gandiva's random grouping: n draws of two unassigned jobs; keep the pairs that help."""
    rng = random.Random(seed)
    types = problem.gpu_types
    cap = np.array([float(problem.cluster[t]) for t in types])
    jobs = problem.jobs
    unassigned = list(range(len(jobs)))  # job indices; order is only the RNG's business
    pairs: list[tuple[ProblemJob, ProblemJob]] = []
    for _ in range(len(jobs)):
        if len(unassigned) < 2:
            break
        i, j = rng.sample(range(len(unassigned)), 2)
        a, b = jobs[unassigned[i]], jobs[unassigned[j]]
        if a.scale_factor != b.scale_factor:
            continue
        if pair_rates(table, a.job_type, b.job_type, a.scale_factor) is None:
            continue
        for k in sorted((i, j), reverse=True):  # O(1) swap-remove, larger position first
            unassigned[k] = unassigned[-1]
            unassigned.pop()
        pairs.append((a, b))
    kept = []
    split: list[ProblemJob] = []
    for a, b in pairs:
        if _normalised_packed_throughput(table, a, b, types, cap) >= 1.0:
            kept.append((a, b))
        else:
            split.extend((a, b))
    order = {j.id: i for i, j in enumerate(jobs)}
    singles = [jobs[i] for i in unassigned] + split
    singles.sort(key=lambda j: order[j.id])
    return kept, singles


def _usable(job: ProblemJob, types: list[str], cap: np.ndarray) -> np.ndarray:
    tput = np.array([job.throughput.get(t, 0.0) for t in types])
    return (tput > 0) & (job.scale_factor <= cap)


def _pair_usable(
    table: PairTable, a: ProblemJob, b: ProblemJob, types: list[str], cap: np.ndarray
) -> np.ndarray:
    rates = pair_rates(table, a.job_type, b.job_type, a.scale_factor) or {}
    both = _usable(a, types, cap) & _usable(b, types, cap)
    return np.array([both[k] and t in rates for k, t in enumerate(types)])


def _normalised_packed_throughput(
    table: PairTable, a: ProblemJob, b: ProblemJob, types: list[str], cap: np.ndarray
) -> float:
    rates = pair_rates(table, a.job_type, b.job_type, a.scale_factor) or {}
    usable = _pair_usable(table, a, b, types, cap)
    total = 0.0
    for k, t in enumerate(types):
        if not usable[k]:
            continue
        ra, rb = rates[t]
        if ra <= 0 or rb <= 0:
            return 0.0
        total += ra / a.throughput[t] + rb / b.throughput[t]
    return total
