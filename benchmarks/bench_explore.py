"""What exploration costs and gains (core/learned_rows/explore.py): the same honest runs as
benchmarks/bench_liars.py (24 jobs of no known type, each with its own true row, on 4
V100 + 4 P100 + 4 K80, the daemon's trust bounds), with the exploration budget off and
on.

    python benchmarks/bench_explore.py --policy max_min_fairness --seeds 0,1,2 \\
        --bonus 2 --restarts 2 --gpu-seconds 3600

Per seed: mean and max JCT, restarts and GPU-hours lost to restarts (the preemption
overhead of each restart), off and on; then the medians of on/off.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from typing import Any

from bench_liars import run

from slurm_gavel.core.learned_rows.explore import Exploration
from slurm_gavel.core.learned_rows.row_trust import TrustBounds


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--policy", default="max_min_fairness")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--bonus", type=float, default=Exploration.bonus)
    ap.add_argument("--restarts", type=int, default=Exploration.max_restarts)
    ap.add_argument("--gpu-seconds", type=float, default=Exploration.max_gpu_seconds)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    explore = Exploration(args.bonus, args.restarts, args.gpu_seconds)
    rows: list[dict[str, Any]] = []
    for seed in (int(s) for s in args.seeds.split(",")):
        off = run(args.policy, "honest", seed, TrustBounds())
        on = run(args.policy, "honest", seed, TrustBounds(), explore)
        rows.append({"seed": seed, "off": off, "on": on})
    if args.json:
        json.dump({"policy": args.policy, "explore": vars(args), "runs": rows}, sys.stdout)
        print()
        return 0
    print(f"policy {args.policy}, {explore}")
    keys = ("mean_jct", "makespan", "restarts", "restart_gpu_hours")
    print(f"{'seed':>4} " + " ".join(f"{k + ' off/on':>26}" for k in keys))
    for r in rows:
        cells = [f"{r['off'][k]:>12.4g} {r['on'][k]:>12.4g}  " for k in keys]
        print(f"{r['seed']:>4} " + " ".join(cells))
    for k in keys:
        ratios = [r["on"][k] / r["off"][k] for r in rows if r["off"][k]]
        if ratios:
            print(f"median on/off {k}: {statistics.median(ratios):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
