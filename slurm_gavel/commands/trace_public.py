"""`slurm-gavel trace philly` and `trace alibaba`: public cluster traces as simulator
traces (simulate/philly.py and simulate/alibaba.py say how each is converted)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from slurm_gavel.domain.model import Job
from slurm_gavel.domain.throughputs import load_table
from slurm_gavel.errors import read_utf8
from slurm_gavel.simulate.alibaba import alibaba_cluster, alibaba_jobs, parse_gpu_map
from slurm_gavel.simulate.philly import Skipped, parse_start, philly_jobs
from slurm_gavel.simulate.traces import TraceError, trace_csv

PHILLY_URL = "https://github.com/siasosp23/artifacts (sia-simulator/traces/philly.csv)"
ALIBABA_URL = "https://github.com/alibaba/clusterdata (cluster-trace-gpu-v2023/csv/)"


def add_parsers(tsub: argparse._SubParsersAction) -> None:
    p: argparse.ArgumentParser = tsub.add_parser(
        "philly",
        help="a window of the Philly trace (Sia's copy) as a trace CSV",
        description=(
            f"Convert a window of Microsoft's Philly trace as Sia publishes it ({PHILLY_URL}) "
            "into the trace CSV `simulate --trace` reads: arrival since the window's start, "
            "GPU count, account = virtual cluster, a job type drawn by a seeded hash of the "
            "row among the table's types with that GPU count, and total_steps = duration x "
            "that type's v100 rate."
        ),
    )
    p.add_argument("input", metavar="PHILLY_CSV", help="Sia's philly.csv")
    p.add_argument("--start", required=True, help="window start, e.g. '2017-10-17 00:00'")
    p.add_argument("--hours", type=float, default=12.0, help="window length (default 12)")
    p.add_argument("--min-duration", type=float, default=60.0, help="skip shorter jobs (s)")
    p.add_argument(
        "--max-duration", type=float, default=7 * 86400.0, help="skip longer jobs (s, 7 days)"
    )
    _common(p)
    p.set_defaults(func=philly)

    a: argparse.ArgumentParser = tsub.add_parser(
        "alibaba",
        help="a window of Alibaba's GPU trace v2023 as a trace CSV (and a cluster spec)",
        description=(
            f"Convert GPU pods of Alibaba's cluster-trace-gpu-v2023 ({ALIBABA_URL}) created "
            "in a window into a trace CSV (duration = deletion - scheduled time, account = "
            "QoS class, job type and steps as for Philly); with --nodes, print the node "
            "list's GPU mix as a --cluster spec, scaled by --scale, to stderr (or --cluster-out)."
        ),
    )
    a.add_argument("input", metavar="POD_CSV", help="e.g. openb_pod_list_default.csv")
    a.add_argument("--start", type=float, default=0.0, help="window start, seconds into the trace")
    a.add_argument("--hours", type=float, default=24.0, help="window length (default 24)")
    a.add_argument(
        "--fractional",
        choices=("whole", "skip"),
        default="whole",
        help="pods asking a fraction of a GPU (shard candidates): a whole GPU (default) or skip",
    )
    a.add_argument("--nodes", metavar="NODE_CSV", help="openb_node_list_gpu_node.csv")
    a.add_argument("--scale", type=float, default=0.01, help="share of the GPUs (default 0.01)")
    a.add_argument(
        "--gpu-map",
        action="append",
        default=[],
        metavar="MODEL=TYPE",
        help="map a GPU model to a table GPU type (repeatable; defaults: V100*,A10=v100, "
        "P100,T4=p100, G1-G3=k80)",
    )
    a.add_argument("--cluster-out", metavar="FILE", help="write the cluster spec here")
    _common(a)
    a.set_defaults(func=alibaba)


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--seed", type=int, default=0, help="seed of the job-type rule (default 0)")
    p.add_argument("--throughputs", metavar="FILE", help="throughput table (default shipped)")
    p.add_argument(
        "--reference-gpu", default="v100", help="GPU type whose rate makes steps (default v100)"
    )
    p.add_argument("-o", "--output", default="-", metavar="FILE", help="trace CSV (- = stdout)")


def _read(path: str) -> str:
    return read_utf8(
        Path(path), TraceError, unreadable="cannot read it ({strerror})", save_as="UTF-8"
    )


def _finish(args: argparse.Namespace, name: str, jobs: list[Job], skipped: Skipped) -> int:
    if not jobs:
        raise TraceError(f"{args.input}: no job in the window; check --start and --hours")
    text = trace_csv(jobs)
    if args.output == "-":
        sys.stdout.write(text)
    else:
        Path(args.output).write_text(text)
    print(f"trace {name}: {len(jobs)} jobs kept, {skipped.total} skipped", file=sys.stderr)
    for line in skipped.lines():
        print(line, file=sys.stderr)
    return 0


def philly(args: argparse.Namespace) -> int:
    table = load_table(args.throughputs)
    jobs, skipped = philly_jobs(
        _read(args.input),
        args.input,
        table,
        parse_start(args.start),
        args.hours,
        seed=args.seed,
        min_duration=args.min_duration,
        max_duration=args.max_duration,
        reference_gpu=args.reference_gpu,
    )
    return _finish(args, "philly", jobs, skipped)


def alibaba(args: argparse.Namespace) -> int:
    table = load_table(args.throughputs)
    if args.nodes:
        spec = alibaba_cluster(
            _read(args.nodes), args.nodes, table, parse_gpu_map(args.gpu_map), args.scale
        )
        if args.cluster_out:
            Path(args.cluster_out).write_text(spec + "\n")
        print(f"cluster: {spec}", file=sys.stderr)
    jobs, skipped = alibaba_jobs(
        _read(args.input),
        args.input,
        table,
        args.start,
        args.hours,
        seed=args.seed,
        fractional=args.fractional,
        reference_gpu=args.reference_gpu,
    )
    return _finish(args, "alibaba", jobs, skipped)
