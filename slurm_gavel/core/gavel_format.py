"""Import Gavel's own simulation throughput file into a :class:`ThroughputTable`.

Gavel keys look like ``"('ResNet-50 (batch size 64)', 1)"`` under GPU names such
as ``"v100"`` and ``"v100_unconsolidated"``; ``"null"`` holds the job alone and
other keys the pair (this job, other job) when co-located. Sites that measured
their own table with Gavel's tooling can convert it with
``python -m slurm_gavel.core.gavel_format GAVEL.json OUT.json``.
"""

from __future__ import annotations

import ast
import json
import sys
from typing import Any

from slurm_gavel.domain.throughputs import ThroughputError, ThroughputTable

UNCONSOLIDATED = "_unconsolidated"


def _parse_key(key: str) -> tuple[str, int]:
    try:
        job_type, sf = ast.literal_eval(key)
    except (ValueError, SyntaxError) as e:
        raise ThroughputError(
            f"Gavel key {key!r} is not of the form \"('<job type>', <n>)\""
        ) from e
    return str(job_type), int(sf)


def table_from_gavel(data: dict[str, Any], source: str) -> ThroughputTable:
    table = ThroughputTable(source=source)
    for gpu_key, entries in data.items():
        spread = gpu_key.endswith(UNCONSOLIDATED)
        gpu = gpu_key.removesuffix(UNCONSOLIDATED)
        for key, values in entries.items():
            job_type, sf = _parse_key(key)
            target = table.unconsolidated if spread else table.alone
            target.setdefault((job_type, sf), {})[gpu] = float(values["null"])
            if spread:
                continue  # co-location figures are taken from the consolidated rows
            for other_key, pair in values.items():
                if other_key == "null":
                    continue
                other, other_sf = _parse_key(other_key)
                if other_sf != sf or (pair[0] <= 0 and pair[1] <= 0):
                    continue  # Gavel writes 0,0 for pairs it never measured
                # store each unordered pair once, in sorted order
                if (other, job_type, sf) in table.pairs:
                    continue
                table.pairs.setdefault((job_type, other, sf), {})[gpu] = (
                    float(pair[0]),
                    float(pair[1]),
                )
    # unconsolidated rows only mean something for multi-GPU jobs
    table.unconsolidated = {k: v for k, v in table.unconsolidated.items() if k[1] > 1}
    return table


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print(
            "usage: python -m slurm_gavel.core.gavel_format GAVEL_THROUGHPUTS.json OUT.json",
            file=sys.stderr,
        )
        return 2
    with open(args[0]) as f:
        data = json.load(f)
    source = (
        "Gavel (Narayanan et al., OSDI 2020), simulation throughputs published with its "
        "simulator (simulation_throughputs.json): V100/P100/K80, scale factors 1/2/4/8"
    )
    table_from_gavel(data, source).save(args[1])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
