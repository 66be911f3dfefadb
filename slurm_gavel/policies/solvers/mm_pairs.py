"""Space-sharing candidates: which jobs may share GPUs of a type, and at what rates.

Candidate rule (docs/design.md §2.1): two jobs of the same scale factor whose job types have
a pair_throughputs entry. On GPU type t the pair additionally needs an entry for
t, room for the scale factor (s <= cap_t) and both jobs able to run on t alone
(so no job ever gets time on a type where its own throughput is 0).

Two jobs of one job type are identical workloads, so a same-type entry (u, v)
describes one situation seen from either side; both jobs are credited
(u + v) / 2. For the shipped table u == v and nothing changes.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from slurm_gavel.domain.model import GpuType, Problem, pair_lookup
from slurm_gavel.policies.solvers.classes import JobClasses, capacity_share_throughput
from slurm_gavel.policies.solvers.mm_lp import PairVars

PairTable = dict[tuple[str, str, int], dict[GpuType, tuple[float, float]]]


def pair_rates(
    table: PairTable, type_a: str, type_b: str, scale: int
) -> dict[GpuType, tuple[float, float]] | None:
    """(a's, b's) steps/s per GPU type when jobs of these types share GPUs, or None."""
    row = table.get((type_a, type_b, scale))
    if row is None:
        return None
    if type_a == type_b:
        return {t: ((u + v) / 2, (u + v) / 2) for t, (u, v) in row.items()}
    return row


def class_pair_vars(
    problem: Problem, classes: JobClasses, fairness_throughput: np.ndarray | None = None
) -> PairVars:
    """Pair variables for every class pair (c <= d) and GPU type where sharing is allowed.

    Gains are normalised like single time: s * rate / (w * P), with P computed from
    `fairness_throughput` (default: the real throughputs).
    """
    tput = classes.throughput if fairness_throughput is None else fairness_throughput
    norm = classes.weight * capacity_share_throughput(tput, classes.capacity)
    return _build(problem, classes, classes.scale / np.where(norm > 0, norm, np.inf))


def _build(problem: Problem, classes: JobClasses, factor: np.ndarray) -> PairVars:
    table = pair_lookup(problem)
    allowed = classes.allowed()
    count = classes.count
    type_index = {t: k for k, t in enumerate(classes.types)}
    by_scale: dict[int, list[int]] = defaultdict(list)
    for c in range(classes.n_classes):
        by_scale[int(classes.scale[c])].append(c)
    cs: list[int] = []
    ds: list[int] = []
    ts: list[int] = []
    gc: list[float] = []
    gd: list[float] = []
    gpus: list[float] = []
    for scale, members in by_scale.items():
        for i, c in enumerate(members):
            for d in members[i:]:
                if c == d and count[c] < 2:
                    continue  # a lone job cannot pair with itself
                rates = pair_rates(table, classes.job_type[c], classes.job_type[d], scale)
                if rates is None:
                    continue
                for t, (rc, rd) in rates.items():
                    k = type_index.get(t)
                    if k is None or not (allowed[c, k] and allowed[d, k]):
                        continue
                    if rc <= 0 and rd <= 0:
                        continue
                    cs.append(c)
                    ds.append(d)
                    ts.append(k)
                    gc.append(factor[c] * rc)
                    gd.append(factor[d] * rd)
                    gpus.append(float(scale))
    return PairVars(
        c=np.array(cs, dtype=np.int64),
        d=np.array(ds, dtype=np.int64),
        t=np.array(ts, dtype=np.int64),
        gain_c=np.array(gc, dtype=np.float64),
        gain_d=np.array(gd, dtype=np.float64),
        gpus=np.array(gpus, dtype=np.float64),
    )
