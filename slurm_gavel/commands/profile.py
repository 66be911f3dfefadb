"""`slurm-gavel profile`: measure the reference workloads here and merge into a table."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from slurm_gavel.estimate import estimate_missing
from slurm_gavel.profiler import CPU_CAVEAT, ProfileError, gpu_type_key, gpus, merge, profile
from slurm_gavel.throughputs import load_table


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "profile",
        help="measure job types on this machine's GPU and merge into a throughput table",
        description=(
            "Run each reference workload (workloads/, synthetic data) for a measured window "
            "on the local device and write steps/s into a throughput table: alone at scale "
            "factor 1 (and more where GPUs allow), and co-located pairs with --pairs. The "
            "device is named with NVML ('cpu' without a GPU); every cell gets a note with "
            "the device and the date."
        ),
    )
    p.add_argument(
        "--types",
        nargs="+",
        metavar="TYPE",
        help="job types to measure (default: every type of the base table)",
    )
    p.add_argument("--pairs", action="store_true", help="also measure co-located pairs")
    p.add_argument(
        "--seconds",
        type=float,
        default=30.0,
        help="measured window per run, after warm-up (default 30)",
    )
    p.add_argument(
        "--scale-factors",
        default=None,
        metavar="1,2,...",
        help="scale factors (default: 1, 2, 4, 8 up to the visible GPUs; 1 on CPU)",
    )
    p.add_argument("--device", default="auto", help="auto (default), cpu or cuda")
    p.add_argument(
        "--gpu-type",
        default=None,
        help="table column for this device (default: from its name, e.g. h100)",
    )
    p.add_argument(
        "--out",
        required=True,
        metavar="TABLE",
        help="table file to merge into (created from --base if missing)",
    )
    p.add_argument(
        "--base",
        default=None,
        metavar="TABLE",
        help="table to start from when --out does not exist (default: shipped)",
    )
    p.add_argument(
        "--estimate",
        action="store_true",
        help="then estimate this device's unmeasured cells (marked as estimates)",
    )
    p.add_argument(
        "--tiny", action="store_true", help="tiny model configs (for tests; the notes say so)"
    )
    p.set_defaults(func=run)


def _scale_factors(text: str | None, n_gpus: int) -> list[int]:
    if text is None:
        return [sf for sf in (1, 2, 4, 8) if sf <= max(1, n_gpus)]
    try:
        sfs = sorted({int(x) for x in text.split(",") if x.strip()})
    except ValueError:
        raise ProfileError(f"--scale-factors {text!r}: expected e.g. 1,2,4") from None
    if not sfs or sfs[0] < 1:
        raise ProfileError(f"--scale-factors {text!r}: scale factors are >= 1")
    return sfs


def run(args: argparse.Namespace) -> int:
    out = Path(args.out)
    table = load_table(out if out.exists() else args.base)
    names = gpus() if args.device != "cpu" else []
    device_name = names[0] if names else "cpu"
    device = args.device if names or args.device != "auto" else "cpu"
    gpu_type = args.gpu_type or gpu_type_key(device_name)
    sfs = _scale_factors(args.scale_factors, len(names))
    if len(names) and sfs[-1] > len(names):
        raise ProfileError(f"scale factor {sfs[-1]} needs {sfs[-1]} GPUs; {len(names)} visible")
    types = args.types or table.job_types
    unknown = [t for t in types if not table.has(t, 1)]
    if unknown:  # a type the table lacks may still be a workload; the worker says if not
        print(f"note: not in the base table yet: {', '.join(unknown)}", file=sys.stderr)
    if device_name == "cpu":
        print(
            f"warning: no GPU visible: {CPU_CAVEAT}; the tool runs (tests use it "
            "so), but measure on a GPU node for the table",
            file=sys.stderr,
        )
    print(
        f"profiling {len(types)} job type(s) on {device_name} as '{gpu_type}', "
        f"scale factors {sfs}, {args.seconds:g} s each",
        file=sys.stderr,
    )
    results = profile(
        types,
        seconds=args.seconds,
        device=device,
        scale_factors=sfs,
        pairs=args.pairs,
        tiny=args.tiny,
        log=lambda line: print(f"  {line}", file=sys.stderr, flush=True),
    )
    merge(table, results, gpu_type=gpu_type, device_name=device_name, tiny=args.tiny)
    if args.estimate:
        table, cells = estimate_missing(table, [gpu_type])
        print(f"estimated {len(cells)} unmeasured cell(s) for '{gpu_type}'", file=sys.stderr)
    table.save(out)
    print(f"wrote {out}", file=sys.stderr)
    return 0
