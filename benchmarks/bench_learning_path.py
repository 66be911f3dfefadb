"""The learning path's choices (core/learned_rows/relearn.py, job_rows.measured_cell) on the
1,000-job trace of EXPERIMENTS.md ("What learning costs"): one simulation of
max_min_fairness per call, with the constants of core/learned_rows/relearn.py set as asked.

    python benchmarks/bench_learning_path.py --seed 0 --knowledge learned
    python benchmarks/bench_learning_path.py --seed 0 --misjudged 100     # never re-solve
    python benchmarks/bench_learning_path.py --seed 0 --reset-accounting  # Gavel's reset

It runs the product's simulate() on a generated trace (own rows spread 0.3, 900 s
inter-arrival, v100/p100/k80 x 12 GPUs) with the measurement model (--noise, --startup),
and prints one JSON line: the average JCT in hours, restarts and reallocations.
"""

from __future__ import annotations

import argparse
import json
import time

from slurm_gavel.backends.cluster_spec import parse_cluster_spec
from slurm_gavel.core.learned_rows import relearn
from slurm_gavel.core.learned_rows.job_rows import Knowledge
from slurm_gavel.domain.model import Allocation
from slurm_gavel.domain.throughputs import load_table
from slurm_gavel.simulate.engine import SimulationOptions, simulate
from slurm_gavel.simulate.generate import generate_trace
from slurm_gavel.simulate.true_rows import draw_true_rows


def main(argv: list[str] | None = None) -> dict[str, object]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--jobs", type=int, default=1000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--knowledge", default="learned", choices=[k.value for k in Knowledge])
    p.add_argument("--noise", type=float, default=0.1, help="measurement noise (default 0.1)")
    p.add_argument("--startup", type=float, default=30.0, help="start-up seconds (default 30)")
    p.add_argument("--misjudged", type=float, default=relearn.MISJUDGED)
    p.add_argument("--payback", type=float, default=relearn.PAYBACK)
    p.add_argument(
        "--reset-accounting",
        action="store_true",
        help="reset the mechanism's accounting at every re-solve, as Gavel does",
    )
    args = p.parse_args(argv)
    relearn.MISJUDGED, relearn.PAYBACK = args.misjudged, args.payback
    if args.reset_accounting:

        def never(old: Allocation | None, new: Allocation) -> bool:
            return False

        relearn.keeps_accounting = never
    table = load_table()
    nodes = parse_cluster_spec("v100:3x4,p100:3x4,k80:3x4", table)
    jobs = generate_trace(args.jobs, 900.0, table, seed=args.seed)
    rows = draw_true_rows(jobs, table, ["v100", "p100", "k80"], 0.3, args.seed)
    opts = SimulationOptions(
        record_wall_time=False,
        progress=False,
        knowledge=Knowledge(args.knowledge),
        seed=args.seed,
        measurement_noise=args.noise,
        startup_seconds=args.startup,
    )
    t0 = time.perf_counter()
    s = simulate(jobs, nodes, table, "max_min_fairness", opts, rows).summary
    out = {
        **{k: v for k, v in vars(args).items()},
        "avg_jct_h": round(s["avg_jct_s"] / 3600, 2),
        "restarts": s.get("preemptions"),
        "reallocations": s.get("reallocations"),
        "seconds": round(time.perf_counter() - t0, 1),
    }
    print(json.dumps(out))
    return out


if __name__ == "__main__":
    main()
