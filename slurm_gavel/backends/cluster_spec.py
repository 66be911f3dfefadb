"""The simulated cluster's nodes from a spec (`simulate --cluster`):
`TYPE:NODESxGPUS,...`, e.g. `v100:3x4,p100:3x4`."""

from __future__ import annotations

import re

from slurm_gavel.domain.cluster_model import Node
from slurm_gavel.domain.throughputs import ThroughputTable
from slurm_gavel.errors import InputError

_SPEC = re.compile(r"^([A-Za-z0-9_.\-]+):(\d+)x(\d+)$")


class ClusterSpecError(InputError):
    """The --cluster spec is malformed or names a GPU type the table lacks."""


def parse_cluster_spec(spec: str, table: ThroughputTable | None = None) -> list[Node]:
    """`v100:3x4,p100:3x4` -> 3 nodes of 4 V100s and 3 nodes of 4 P100s."""
    nodes: list[Node] = []
    known = set(table.gpu_types) if table is not None else None
    seen: set[str] = set()
    for part in [p.strip() for p in spec.split(",") if p.strip()]:
        m = _SPEC.match(part)
        if m is None:
            raise ClusterSpecError(
                f"cluster spec '{part}': expected TYPE:NODESxGPUS, e.g. v100:3x4 "
                "(3 nodes of 4 GPUs)"
            )
        gpu, n_nodes, per_node = m.group(1), int(m.group(2)), int(m.group(3))
        if known is not None and gpu not in known:
            raise ClusterSpecError(
                f"cluster spec '{part}': the throughput table has no GPU type '{gpu}'; "
                f"it knows {', '.join(sorted(known))}"
            )
        if gpu in seen:
            raise ClusterSpecError(f"cluster spec: GPU type '{gpu}' is given twice")
        if n_nodes < 1 or per_node < 1:
            raise ClusterSpecError(f"cluster spec '{part}': nodes and GPUs must be >= 1")
        seen.add(gpu)
        nodes.extend(Node(f"{gpu}-{i:03d}", gpu, per_node) for i in range(n_nodes))
    if not nodes:
        raise ClusterSpecError("cluster spec is empty; give e.g. v100:3x4,p100:3x4,k80:3x4")
    return nodes
