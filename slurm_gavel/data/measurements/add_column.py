"""Build the shipped gavel-osdi2020-h200.json: Gavel's table (gavel-osdi2020.json,
untouched) plus an h200 column from the H200 profile records beside this file.

    python slurm_gavel/data/measurements/add_column.py [--check]

Idempotent: the column (cells, pair cells and notes) is dropped and built again from
h200/profile-alone.json and h200/profile-pairs.json, so the other columns are never
touched. Measured cells get the profiler's note (device and date); every other cell of
the column is estimated and noted ``estimate: ...``: at scale factor 1 from the other
job types (core/estimate.py's per-size completion), at 2/4/8 GPUs from that figure
and how the job scales on the V100/P100/K80 (the H200 was measured on one GPU).
``--check`` exits 1 when the shipped table is not what this builds (tests run it so).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from slurm_gavel.core.estimate import estimate_by_scaling, estimate_missing
from slurm_gavel.domain.throughputs import ThroughputTable, load_table, table_from_json
from slurm_gavel.profiling.profiler import merge
from slurm_gavel.profiling.record import _measurement, _read

HERE = Path(__file__).resolve().parent
BASE = HERE.parent / "gavel-osdi2020.json"
TABLE = HERE.parent / "gavel-osdi2020-h200.json"
GPU = "h200"
DEVICE = "NVIDIA H200"
DATE = "2026-11-27"


def without_column(table: ThroughputTable, gpu: str) -> ThroughputTable:
    """The table with every trace of ``gpu`` removed (cells, pair cells, notes, source)."""
    data = table.to_json()
    for by_sf in (*data["throughputs"].values(), *data["unconsolidated"].values()):
        for row in by_sf.values():
            row.pop(gpu, None)
    for p in data["pairs"]:
        p["throughput"].pop(gpu, None)
    data["pairs"] = [p for p in data["pairs"] if p["throughput"]]
    data["notes"] = {k: v for k, v in data["notes"].items() if not k.endswith(f"|{gpu}")}
    data["source"] = "; ".join(s for s in data["source"].split("; ") if not s.startswith(gpu))
    return table_from_json(data, "table")


def build(base: ThroughputTable) -> ThroughputTable:
    table = without_column(base, GPU)
    alone = _read(HERE / GPU / "profile-alone.json")["measurements"]
    pairs = _read(HERE / GPU / "profile-pairs.json")["measurements"]
    found = [_measurement(row, f"{GPU}/profile-alone.json[{i}]")[0] for i, row in enumerate(alone)]
    found += [
        m
        for i, row in enumerate(pairs)
        if (m := _measurement(row, f"{GPU}/profile-pairs.json[{i}]")[0]).partner is not None
    ]
    merge(table, found, gpu_type=GPU, device_name=DEVICE, date=DATE)
    table, _ = estimate_missing(table, [GPU])
    table, _ = estimate_by_scaling(table, [GPU])
    table.source += f"; {GPU} cells not measured there: estimated (notes say which)"
    return table


def main(argv: list[str]) -> int:
    built = build(load_table(BASE))
    text = json.dumps(built.to_json(), indent=1) + "\n"
    if "--check" in argv:
        same = TABLE.read_text() == text
        if not same:
            print(f"{TABLE} is not what {Path(__file__).name} builds: run it", file=sys.stderr)
        return 0 if same else 1
    built.save(TABLE)
    print(f"wrote {TABLE}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
