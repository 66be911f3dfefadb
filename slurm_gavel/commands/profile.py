"""`slurm-gavel profile`: measure the reference workloads here and merge into a table."""

from __future__ import annotations

import argparse
import re
import sys
import time
from pathlib import Path

from slurm_gavel.commands.progress_line import Progress
from slurm_gavel.core.estimate import estimate_missing
from slurm_gavel.domain.throughputs import load_table
from slurm_gavel.profiling.profiler import (
    CPU_CAVEAT,
    Cell,
    Measurement,
    ProfileError,
    gpu_type_key,
    gpus,
    measure,
    merge,
    plan,
)
from slurm_gavel.profiling.record import Record, open_record, record_path

_BATCH = re.compile(r"^(.+) \(batch size (\d+)\)$")


SUMMARY = "measure job types on this machine's GPU and merge into a throughput table"


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Run each reference workload (workloads/, synthetic data) for a measured window on
    the local device and write steps/s into a throughput table: alone at scale factor 1
    (and more where GPUs allow), and co-located pairs with --pairs. The device is named
    with NVML ('cpu' without a GPU); every cell gets a note with the device and the
    date. Each measurement is saved as it completes (in TABLE's .profile.json) and the
    table is written at the end; after a failure or Ctrl-C, the same command measures
    only the rest."""
    p.add_argument(
        "--types",
        nargs="+",
        metavar="TYPE",
        help=(
            "job types to measure, or 'all' for every type of the table (default: one per "
            "model family, its smallest batch size: 7 of the shipped table's 26)"
        ),
    )
    p.add_argument("--pairs", action="store_true", help="also measure co-located pairs")
    p.add_argument(
        "--seconds",
        type=float,
        default=10.0,
        help="measured window per run, after warm-up (default 10; at least 3 steps)",
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
    again = p.add_mutually_exclusive_group()
    again.add_argument(
        "--resume",
        action="store_true",
        help=(
            "continue the run recorded in TABLE's .profile.json (the default whenever that "
            "record exists and has the same set-up); fail if there is none"
        ),
    )
    again.add_argument(
        "--fresh",
        action="store_true",
        help="discard the record of an earlier run and measure everything again",
    )


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


def default_types(job_types: list[str]) -> list[str]:
    """One job type per model family, its smallest batch size: minutes, not hours (the
    other batch sizes are left to --estimate or --types all)."""
    best: dict[str, tuple[int, str]] = {}
    for jt in job_types:
        m = _BATCH.match(jt)
        family, size = (m.group(1), int(m.group(2))) if m else (jt, 0)
        if family not in best or size < best[family][0]:
            best[family] = (size, jt)
    return [jt for _, jt in best.values()]


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
    if not args.seconds > 0:
        raise ProfileError(f"--seconds {args.seconds}: must be > 0")
    if args.types is None:
        types = default_types(table.job_types)
    elif args.types == ["all"]:
        types = list(table.job_types)
    else:
        types = list(dict.fromkeys(args.types))
    unknown = [t for t in types if not table.has(t, 1)]
    if unknown:  # a type the table lacks may still be a workload; the worker says if not
        print(f"note: not in the base table yet: {', '.join(unknown)}", file=sys.stderr)
    if device_name == "cpu":
        print(
            f"warning: no GPU visible: {CPU_CAVEAT}; the tool runs (tests use it "
            "so), but measure on a GPU node for the table",
            file=sys.stderr,
        )
    setup = {
        "device_name": device_name,
        "gpu_type": gpu_type,
        "device": device,
        "seconds": args.seconds,
        "scale_factors": sfs,
        "types": types,
        "pairs": args.pairs,
        "tiny": args.tiny,
    }
    cells = plan(types, sfs, args.pairs)
    path = record_path(out)
    if args.resume and not path.exists():
        raise ProfileError(f"--resume: there is no {path} to resume; run without --resume")
    record = open_record(path, setup, cells, fresh=args.fresh)
    print(
        f"profiling {len(types)} job type(s) on {device_name} as '{gpu_type}', "
        f"scale factors {sfs}, {args.seconds:g} s each: {len(cells)} measurement(s)"
        + (f", {len(record.done)} already in {path}" if record.done else ""),
        file=sys.stderr,
    )
    _measure_all(record, cells, args)
    merge(table, record.done.values(), gpu_type=gpu_type, device_name=device_name, tiny=args.tiny)
    if args.estimate:
        table, estimated = estimate_missing(table, [gpu_type])
        print(f"estimated {len(estimated)} unmeasured cell(s) for '{gpu_type}'", file=sys.stderr)
    table.save(out)
    print(f"wrote {out} (the measurements stay in {path})", file=sys.stderr)
    return 0


def _measure_all(record: Record, cells: list[Cell], args: argparse.Namespace) -> None:
    """Measure the cells the record lacks, saving it after each; a failure or Ctrl-C
    says what is kept and how to go on."""
    progress = Progress(len(cells), len(record.done), list(record.seconds.values()))
    todo = [c for c in cells if c not in record.done]
    try:
        for cell in todo:
            progress.start(cell.label())
            t0 = time.monotonic()
            m = measure(cell, seconds=args.seconds, device=record.setup["device"], tiny=args.tiny)
            took = time.monotonic() - t0
            record.add(m, took)
            progress.done(cell.label(), _result(m), took)
    except (ProfileError, KeyboardInterrupt) as e:
        progress.clear()
        if not record.done:
            raise
        kept = (
            f"{len(record.done)} of {len(cells)} measurement(s) kept in {record.path}: "
            "rerun the same command to measure the rest"
        )
        if isinstance(e, KeyboardInterrupt):
            print(f"interrupted; {kept}", file=sys.stderr)
            raise
        raise ProfileError(f"{e}; {kept} (after fixing the cause)") from None


def _result(m: Measurement) -> str:
    if m.partner is not None:
        return f"{m.steps_per_s:.3f} + {m.partner_steps_per_s:.3f} steps/s"
    return f"{m.steps_per_s:.3f} steps/s ({m.steps} steps)"
