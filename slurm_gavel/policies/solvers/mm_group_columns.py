"""The partner-group pair columns of the packed max-min LP (mm_pack_groups.py).

A pair's throughputs depend only on the two jobs' job types and scale factor, so
each class c gets one pair column per partner group b = (job type, scale) and GPU
type t, worth factor_c * r_ab(t) per unit to c's job. Across two groups a column
also carries its consistency row (a, b, t) and the side it counts from (+1 from the
lower group, -1 from the higher); within one group it has none (row -1). The LP,
its hint and the pairs it yields (mm_pack_groups.py) all read these columns.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from slurm_gavel.domain.model import Problem, pair_lookup
from slurm_gavel.policies.solvers.classes import JobClasses
from slurm_gavel.policies.solvers.mm_pairs import pair_rates


@dataclass
class GroupColumns:
    """Pair columns: class, partner group, GPU type, gain per unit, consistency row."""

    c: np.ndarray
    b: np.ndarray
    t: np.ndarray
    gain: np.ndarray
    row: np.ndarray  # consistency row (-1: within one group)
    sign: np.ndarray


def partner_groups(classes: JobClasses) -> tuple[np.ndarray, list[tuple[str, int]]]:
    keys: dict[tuple[str, int], int] = {}
    of = np.array(
        [
            keys.setdefault((classes.job_type[c], int(classes.scale[c])), len(keys))
            for c in range(classes.n_classes)
        ],
        dtype=np.int64,
    )
    return of, list(keys)


def group_pair_columns(
    problem: Problem, classes: JobClasses, group: np.ndarray, keys: list[tuple[str, int]],
    factor: np.ndarray,
) -> tuple[GroupColumns, int]:  # fmt: skip
    table = pair_lookup(problem)
    allowed = classes.allowed()
    type_index = {t: k for k, t in enumerate(classes.types)}
    n_groups = len(keys)
    members = [np.nonzero(group == g)[0] for g in range(n_groups)]
    jobs_in = np.array([int(classes.count[m].sum()) for m in members])
    on_type = np.array([allowed[m].any(axis=0) for m in members]).reshape(n_groups, -1)
    on_members = [[m[allowed[m, k]] for k in range(allowed.shape[1])] for m in members]
    cons: dict[tuple[int, int, int], int] = {}
    cs: list[np.ndarray] = []
    # one entry per block of columns (a partner group and type for the jobs cs[i])
    bs: list[int] = []
    ts: list[int] = []
    rs: list[float] = []
    rows: list[int] = []
    signs: list[float] = []
    for a, (type_a, scale) in enumerate(keys):
        for b, (type_b, scale_b) in enumerate(keys):
            if scale_b != scale or (a == b and jobs_in[a] < 2):
                continue
            rates = pair_rates(table, type_a, type_b, scale)
            if rates is None:
                continue
            for t, (ra, rb) in rates.items():
                k = type_index.get(t)
                if k is None or not on_type[b, k] or (ra <= 0 and rb <= 0):
                    continue
                mem = on_members[a][k]
                if not len(mem):
                    continue
                row, sign = -1, 0.0
                if a != b:
                    row = cons.setdefault((min(a, b), max(a, b), k), len(cons))
                    sign = 1.0 if a < b else -1.0
                cs.append(mem)
                bs.append(b)
                ts.append(k)
                rs.append(ra)
                rows.append(row)
                signs.append(sign)
    size = [len(m) for m in cs]

    def per_col(block: list[Any], dtype: Any) -> np.ndarray:
        return np.repeat(np.asarray(block, dtype=dtype), size)

    c = np.concatenate(cs).astype(np.int64) if cs else np.zeros(0, dtype=np.int64)
    cols = GroupColumns(
        c, per_col(bs, np.int64), per_col(ts, np.int64),
        factor[c] * per_col(rs, np.float64), per_col(rows, np.int64),
        per_col(signs, np.float64),
    )  # fmt: skip
    return cols, len(cons)
