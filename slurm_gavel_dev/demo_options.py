"""The demo's command line (tools/demo): its options, and the defaults a packed policy
changes (its job set, its topology with GPU shards, the unpacked policy to compare)."""

from __future__ import annotations

import argparse
from pathlib import Path

from slurm_gavel.core.moldable.moldable import ScaleRangeError, parse_range
from slurm_gavel_dev import demo_packed as packed
from slurm_gavel_dev import demo_report as rep
from slurm_gavel_dev.demo_slurm import REPO

DESCRIPTION = """\
The demo (`bash tools/demo`): gavel against Slurm alone on a real local Slurm cluster.

It starts a local Slurm cluster with three GPU types (v100, p100, k80; two fake GPUs
each, the SPANK plugin loaded), submits eight tiny reference workloads of four types
with `sbatch --gavel-job-type=...`, runs the slurm-gavel daemon (Gavel's
heterogeneity-aware FIFO, 30 s rounds, restart-aware: a run is kept until its measured
restart cost is paid for) with one progress line per round, then runs the same jobs
under Slurm alone (FIFO, type-blind) and prints per job its type, the GPU types it ran
on, its restarts and its JCT under both (about 6 minutes). It stops everything it
started, also on Ctrl-C. The GPUs are fake: each job paces its steps to the steps/s
Gavel published for its type on its node's GPU type (--emulate-gpu-speed, user guide
section 3); the JCTs are emulated, not measured."""

# The variants, with what each shows; their measured figures are in benchmarks/README.md.
EPILOG = """\
variants:
  --policy max_min_fairness
      Gavel's time sharing instead of FIFO. The restart-aware rounds keep each run
      until its restart cost is paid for; with --no-restart-aware (Gavel's mechanism)
      most jobs move every round, and on a 2-core machine each restart costs 10-20 s,
      which the short rounds make dear: --stay-credit 60 then serves split allocations
      in two-round stints, as the shipped daemon config (conf/gavel.yaml) does.
  --policy max_min_fairness_packed
      space sharing: a cluster with GPU shards, 8 jobs on 3 GPUs run packed, then
      unpacked (max_min_fairness), then under Slurm alone, with a column naming the
      jobs each shared a GPU with and the simulator's prediction beside each average
      (about 13 minutes).
  --moldable [MIN-MAX]
      moldable jobs: four jobs (ResNet-50 and Transformer) each give the range 1-2;
      the daemon chooses each run's count at each (re)start, and the progress lines and
      the final table name it (v100x2; k80x2>p100x2 for a job moved at its count).
      With the default policy on the six GPUs, two jobs start on 2 GPUs and two on 1,
      all done in about a minute of the gavel phase; Slurm alone then runs them on one
      GPU each. Under contention every job runs at its least count, so no count changes
      within the demo's minutes; a job that does change count when resumed is shown by
      tests/backends/slurm/test_moldable_on_slurm.py.
  --simulate
      no Slurm needed (seconds): replays the shipped example trace
      (conf/examples/trace.csv) in the simulator with max-min fairness, its
      heterogeneity-agnostic variant and Slurm's FIFO side by side, and writes the
      plots into the directory --plots names.
  --simulate --moldable
      the shipped trace a second time with moldable jobs (n/2..2n GPUs):
      max_min_fairness rigid against moldable, with the (re)starts by GPU count.
  --jobs, --speed, --topology
      change the set-up; --no-baseline skips the Slurm-alone run.

Measured runs of the demo and its variants: benchmarks/README.md, "The demo"."""


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="tools/demo",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
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
        help=f"moldable jobs: each job of the gavel phase gives this GPU range "
        f"(default {rep.MOLDABLE_RANGE}; --jobs default: {rep.MOLDABLE_JOBS}) and the daemon "
        "chooses its count at each (re)start; the tables name each run's count (v100x2). "
        "With --simulate: the shipped trace rigid, then moldable (n/2..2n GPUs), compared",
    )
    p.add_argument(
        "--round-seconds", type=float, default=30.0, help="daemon round length (default 30)"
    )
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
