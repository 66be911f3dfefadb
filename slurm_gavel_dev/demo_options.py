"""The demo's command line (tools/demo): its options, and the defaults a packed policy
changes (its job set, its topology with GPU shards, the unpacked policy to compare)."""

from __future__ import annotations

import argparse
from pathlib import Path

from slurm_gavel.core.moldable import ScaleRangeError, parse_range
from slurm_gavel_dev import demo_packed as packed
from slurm_gavel_dev import demo_report as rep
from slurm_gavel_dev.demo_slurm import REPO

DESCRIPTION = (
    "The demo (`bash tools/demo`): gavel against Slurm alone on a real local Slurm cluster."
)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="tools/demo", description=DESCRIPTION)
    p.add_argument(
        "--simulate",
        action="store_true",
        help="simulator only (no Slurm): the shipped trace, table and plots",
    )
    p.add_argument(
        "--dir",
        type=Path,
        default=REPO / "run" / "demo",
        help="run dir: cluster, job outputs, daemon state, results.json",
    )
    p.add_argument("--plots", type=Path, help="--simulate: plot dir (default DIR/plots)")
    p.add_argument(
        "--jobs",
        help="TYPE=STEPS;TYPE=STEPS;... (default: 8 jobs; with a packed policy 8 others, "
        "slurm_gavel_dev/demo_packed.py)",
    )
    p.add_argument(
        "--topology",
        help=f"TYPE:NODESxGPUS,... (default {rep.DEFAULT_TOPOLOGY}; with a packed policy "
        f"{packed.PACKED_TOPOLOGY}, {packed.SHARDS_PER_GPU} gres/shard per GPU)",
    )
    # Gavel's heterogeneity-aware FIFO against Slurm's type-blind FIFO: the same queue
    # order, only the GPU type differs. max_min_fairness time-shares (most jobs move every
    # round), which on a couple of cores costs 10-20 s per restart (python + torch).
    p.add_argument(
        "--policy", default="fifo", help="gavel policy (default fifo: heterogeneity-aware FIFO)"
    )
    p.add_argument(
        "--compare-policy",
        help="with a packed policy (max_min_fairness_packed, gandiva): also run the jobs "
        "under this policy (default: the policy without sharing, max_min_fairness); "
        "'none' skips it",
    )
    p.add_argument(
        "--moldable",
        nargs="?",
        const=rep.MOLDABLE_RANGE,
        metavar="MIN-MAX",
        help=f"moldable jobs (issue 25): each job of the gavel phase gives this GPU range "
        f"(default {rep.MOLDABLE_RANGE}; --jobs default: {rep.MOLDABLE_JOBS}) and the daemon "
        "chooses its count at each (re)start; the tables name each run's count (v100x2). "
        "With --simulate: the shipped trace rigid, then moldable (n/2..2n GPUs), compared",
    )
    p.add_argument("--round-seconds", type=float, default=30.0)
    p.add_argument(
        "--stay-credit",
        type=float,
        default=0.0,
        metavar="S",
        help="daemon stay_credit_seconds (default 0: Gavel's mechanism); see conf/gavel.yaml",
    )
    p.add_argument(
        "--no-restart-aware",
        dest="restart_aware",
        action="store_false",
        help=(
            "run the daemon without restart-aware rounds (restart_aware: true by default "
            "here: on a 2-core machine a restart costs 10-20 s against 30 s rounds, and the "
            "daemon keeps a run until its measured restart cost is paid for; without them "
            "max_min_fairness moves most jobs every round, as Gavel's mechanism does)"
        ),
    )
    p.add_argument(
        "--speed",
        type=float,
        default=1.0,
        help="emulated speed = Gavel's published steps/s x SPEED",
    )
    p.add_argument("--timeout", type=float, default=900.0, help="per phase, in seconds")
    p.add_argument("--no-baseline", action="store_true", help="skip the Slurm-alone run")
    return p


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The options, with the defaults of the policy chosen filled in."""
    p = parser()
    args = p.parse_args(argv)
    pack = packed.packs(args.policy)
    if args.moldable is not None:
        if pack:
            p.error(f"--moldable: not with a packed policy ({args.policy}): jobs sharing GPUs "
                    "have one count")  # fmt: skip
        try:
            if parse_range(args.moldable) is None:
                raise ScaleRangeError(f"{args.moldable!r} is one count; write MIN-MAX, e.g. 1-2")
        except ScaleRangeError as e:
            p.error(f"--moldable: {e}")
        args.jobs = args.jobs or rep.MOLDABLE_JOBS
    args.jobs = args.jobs or (packed.PACKED_JOBS if pack else rep.DEFAULT_JOBS)
    args.topology = args.topology or (packed.PACKED_TOPOLOGY if pack else rep.DEFAULT_TOPOLOGY)
    if args.compare_policy is None and pack:
        args.compare_policy = packed.unpacked_of(args.policy)
    elif args.compare_policy == "none":
        args.compare_policy = None
    return args
