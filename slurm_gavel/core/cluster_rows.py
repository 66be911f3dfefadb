"""The throughput rows a round uses: the table's cells for the cluster's GPU types, with
the cells nobody measured yet filled in, and marked.

A site's GPU types need not be in its table: on day one a cluster of A100s and H100s
runs with the shipped V100/P100/K80 table. Every cell (job type, scale factor, GPU type)
of one of the cluster's types is, in this order:

* in the table (published, profiled, observed from running jobs, or an ``estimate:``):
  its value; 0 still means the job cannot run there;
* missing, where some job type has a measurement on that GPU type at this scale factor
  and this job type has one elsewhere: estimated from similar job types by low-rank
  completion (:func:`slurm_gavel.core.estimate.estimate_missing`, as ``slurm-gavel profile
  --estimate`` does), marked :data:`ESTIMATED`;
* missing with nothing to estimate from (no job measured on that type yet): type-blind,
  marked :data:`TYPE_BLIND`: the job's geometric mean over the types it has figures for,
  the same value on every such type, so the policy treats those GPU types as equal for
  it until a running job's report (the daemon's online update) measures one of them.

Type-blind values are never written into a table: they are what a policy needs to run
the job at all, not a figure. Pure: the scheduler builds one per (table, cluster GPU
types) and reuses it while both stay the same.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from slurm_gavel.core.estimate import ESTIMATE_PREFIX, estimate_missing, is_estimate
from slurm_gavel.domain.model import GpuType
from slurm_gavel.domain.throughputs import ThroughputTable

TYPE_BLIND = "unmeasured: type-blind"
ESTIMATED = "estimate"

# (job type, scale factor, GPU type, mark): a cell the round's jobs rely on unmeasured
MarkedCell = tuple[str, int, GpuType, str]


@dataclass
class ClusterRows:
    """Rows of ``table`` completed for the GPU types ``gpu_types`` (see module doc)."""

    table: ThroughputTable  # the source: compared by identity to know when to rebuild
    gpu_types: tuple[GpuType, ...]
    filled: ThroughputTable  # ``table`` plus estimates for the cluster's types (or itself)
    # every row has a measured figure for every cluster type: nothing to mark, ever (the
    # simulator's usual case: marked_cells() then costs nothing per round)
    complete: bool = False
    _rows: dict[tuple[str, int], Mapping[GpuType, float]] = field(default_factory=dict)
    _blind: dict[tuple[str, int], tuple[GpuType, ...]] = field(default_factory=dict)
    _marks: dict[tuple[str, int], dict[GpuType, str]] = field(default_factory=dict)
    _as_table: ThroughputTable | None = None

    def row(self, job_type: str, scale_factor: int) -> Mapping[GpuType, float]:
        """Steps/s on every type for this kind of job; the same object on every call (the
        mechanism's cache compares rows by identity). Raises ThroughputError as
        :meth:`ThroughputTable.row` does for a job type or scale factor it lacks."""
        key = (job_type, scale_factor)
        row = self._rows.get(key)
        if row is not None:
            return row
        base = self.filled.row(job_type, scale_factor)
        missing = tuple(t for t in self.gpu_types if t not in base)
        value = _type_blind_value(base, self.gpu_types) if missing else None
        if value is None:  # nothing missing, or no figure anywhere to go on
            row = base
        else:
            row = {**base, **dict.fromkeys(missing, value)}
            self._blind[key] = missing
        self._rows[key] = row
        return row

    def marks(self, job_type: str, scale_factor: int) -> dict[GpuType, str]:
        """{GPU type: ESTIMATED or TYPE_BLIND} for the cluster's cells of this kind of job
        that were not measured (empty when all were)."""
        key = (job_type, scale_factor)
        out = self._marks.get(key)
        if out is None:
            self.row(job_type, scale_factor)
            out = dict.fromkeys(self._blind.get(key, ()), TYPE_BLIND)
            row = self.filled.alone.get(key, {})
            for t in self.gpu_types:
                if t not in out and t in row and is_estimate(self.filled, *key, t):
                    out[t] = ESTIMATED
            self._marks[key] = out
        return dict(out)

    def as_table(self) -> ThroughputTable:
        """The completed rows as a table, for code that only reads rows (the daemon's
        steps estimate of jobs that report none). It holds type-blind figures, which
        are no measurement: never save it."""
        if self.complete:
            return self.table
        if self._as_table is None:
            rows = {}
            for key in self.filled.alone:
                rows[key] = dict(self.row(*key))
            self._as_table = ThroughputTable(
                alone=rows,
                source=f"{self.table.source} (completed for {', '.join(self.gpu_types)})",
            )
        return self._as_table

    def marked_cells(self, kinds: Iterable[tuple[str, int]]) -> tuple[MarkedCell, ...]:
        """The unmeasured cells of these (job type, scale factor) kinds, sorted."""
        if self.complete:
            return ()
        out = [(jt, sf, t, mark) for jt, sf in set(kinds) for t, mark in self.marks(jt, sf).items()]
        return tuple(sorted(out))


def _type_blind_value(row: Mapping[GpuType, float], cluster: Iterable[GpuType]) -> float | None:
    """The job's figure for a GPU type nothing is known about: the geometric mean (the
    estimator's log space: speed-ups are ratios) of its positive figures on the cluster's
    types, or on every type when the cluster has none of those; None when it has no
    positive figure at all (it cannot run anywhere the table knows: no basis to guess)."""
    here = set(cluster)
    values = [v for t, v in row.items() if t in here and v > 0]
    if not values:
        values = [v for v in row.values() if v > 0]
    if not values:
        return None
    return math.exp(sum(math.log(v) for v in values) / len(values))


def cluster_rows(table: ThroughputTable, gpu_types: Iterable[GpuType]) -> ClusterRows:
    """The rows of ``table`` for a cluster with these GPU types (see module doc).

    Estimates are fitted only when a row lacks one of the cluster's types that the table
    has figures for: a cluster whose types every row covers (the shipped table on
    V100/P100/K80) uses the table's own row objects, untouched.
    """
    types = tuple(dict.fromkeys(gpu_types))
    known = set(table.gpu_types)
    fill = [t for t in types if t in known]
    gaps = any(t not in row for row in table.alone.values() for t in fill)
    filled = estimate_missing(table, fill)[0] if gaps else table
    here = set(types)
    complete = (
        not gaps
        and len(fill) == len(types)
        and not any(
            note.startswith(ESTIMATE_PREFIX) and key.rsplit("|", 1)[-1] in here
            for key, note in table.notes.items()
        )
    )
    return ClusterRows(table, types, filled, complete)


def rows_for(
    current: ClusterRows | None, table: ThroughputTable, gpu_types: Iterable[GpuType]
) -> ClusterRows:
    """``current`` when it was built from this very table for these types, else a new one."""
    types = tuple(dict.fromkeys(gpu_types))
    if current is not None and current.table is table and current.gpu_types == types:
        return current
    return cluster_rows(table, types)
