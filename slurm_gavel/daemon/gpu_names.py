"""The config's GPU type names (key gpu_types), both ways: a site whose Slurm calls a
GPU type otherwise than the throughput table maps Slurm's GRES type name to the
table's. The tap renames what it observes to the table's names (to_table_names), so
the round only sees those, and renames the placement back to Slurm's before the
backend acts on it (to_slurm_names). Pure functions.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from slurm_gavel.domain.cluster_model import Allowed, ClusterSnapshot, RoundPlacement


def to_table_names(snap: ClusterSnapshot, names: Mapping[str, str]) -> ClusterSnapshot:
    """Slurm's GRES type names -> the throughput table's (`names`: config gpu_types);
    a name `names` lacks stays as it is."""

    def name(t: str | None) -> str | None:
        return None if t is None else names.get(t, t)

    return replace(
        snap,
        nodes=tuple(replace(n, gpu_type=names.get(n.gpu_type, n.gpu_type)) for n in snap.nodes),
        jobs=tuple(
            replace(o, gpu_type=name(o.gpu_type), allowed=_allowed(o.allowed, names))
            for o in snap.jobs
        ),
    )


def _allowed(allowed: Allowed | None, names: Mapping[str, str]) -> Allowed | None:
    if allowed is None:
        return None
    return replace(allowed, types=frozenset(names.get(t, t) for t in allowed.types))


def to_slurm_names(placement: RoundPlacement, names: Mapping[str, str]) -> RoundPlacement:
    """The throughput table's GPU type names -> Slurm's, the reverse of to_table_names
    with the same `names` (Slurm's -> the table's)."""
    back = {v: k for k, v in names.items()}
    return replace(
        placement,
        jobs={
            j: replace(p, gpu_type=back.get(p.gpu_type, p.gpu_type))
            for j, p in placement.jobs.items()
        },
    )
