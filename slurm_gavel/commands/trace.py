"""`slurm-gavel trace from-sacct`: a site's past GPU jobs as a simulator trace."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from slurm_gavel.accounting import sacct
from slurm_gavel.accounting.sacct_trace import DEFAULT_STATES, load_mapping, to_trace
from slurm_gavel.commands import trace_public
from slurm_gavel.domain.throughputs import load_table
from slurm_gavel.errors import InputError
from slurm_gavel.simulate.traces import trace_csv

SUMMARY = (
    "make job traces for the simulator (from-sacct: from Slurm's accounting; philly, "
    "alibaba: from public traces)"
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Make job traces for `slurm-gavel simulate`."""
    tsub = p.add_subparsers(
        dest="trace_command",
        required=True,
        metavar="SOURCE",
        help="where the jobs come from: from-sacct (Slurm's accounting), philly or "
        "alibaba (public traces)",
    )
    f: argparse.ArgumentParser = tsub.add_parser(
        "from-sacct",
        help="the site's past GPU jobs, from sacct, as a trace CSV",
        description=(
            "Turn the GPU jobs sacct recorded into the trace CSV `simulate --trace` reads: "
            "arrival (first submission), GPU count, job type (the gavel: comment, else the "
            "--mapping file) and the work done (elapsed time on each GPU type x the "
            "throughput table's steps/s). Prints to stderr how many jobs it skipped and why."
        ),
    )
    f.add_argument("--since", default="now-7days", help="sacct -S (default now-7days)")
    f.add_argument("--until", help="sacct -E (default now)")
    f.add_argument("--partition", action="append", default=[], help="only this partition")
    f.add_argument(
        "--input",
        metavar="FILE",
        help="read saved `sacct -a -X -D --json` (or -P) output instead of running sacct",
    )
    f.add_argument(
        "--mapping",
        metavar="FILE",
        help="YAML rules naming the job type of jobs "
        "without a gavel: comment (- match: {name: 'resnet*'}, type: A3C)",
    )
    f.add_argument("--throughputs", metavar="FILE", help="throughput table (default shipped)")
    f.add_argument(
        "--states",
        default=",".join(DEFAULT_STATES),
        help="final job states kept, comma separated (default COMPLETED: a cancelled or "
        "failed job's duration is not the length of its work)",
    )
    f.add_argument("-o", "--output", default="-", metavar="FILE", help="trace CSV (- = stdout)")
    f.set_defaults(func=from_sacct)
    trace_public.add_parsers(tsub)


def read_runs(args: argparse.Namespace) -> tuple[list[sacct.SacctRun], int]:
    if args.input:
        path = Path(args.input)
        from slurm_gavel.errors import read_utf8

        text = read_utf8(
            path, sacct.SacctError, unreadable="cannot read it ({strerror})", save_as="UTF-8"
        )
        if not sacct.is_json(text):
            # Saved with sacct's own '|' and raw newlines: a comment can forge records.
            print(
                f"slurm-gavel: warning: {path} is sacct -P output, in which any user's job "
                "comment can forge records; save sacct --json output instead",
                file=sys.stderr,
            )
        return sacct.parse_text(text, str(path))
    runs, bad, _ = sacct.query(args.since, args.until, args.partition)
    return runs, bad


def from_sacct(args: argparse.Namespace) -> int:
    table = load_table(args.throughputs)
    rules = load_mapping(Path(args.mapping), table) if args.mapping else []
    states = [s.strip().upper() for s in args.states.split(",") if s.strip()]
    if not states:
        raise InputError("--states names no state (e.g. COMPLETED,TIMEOUT)")
    runs, unreadable = read_runs(args)
    jobs, skipped = to_trace(runs, table, rules, states)
    text = trace_csv(jobs)
    if args.output == "-":
        sys.stdout.write(text)
    else:
        Path(args.output).write_text(text)
    if unreadable:
        skipped.reasons["unreadable sacct line"] += unreadable
    print(f"trace from-sacct: {len(jobs)} jobs kept, {skipped.total} skipped", file=sys.stderr)
    for line in skipped.lines():
        print(line, file=sys.stderr)
    return 0
