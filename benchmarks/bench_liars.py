"""Jobs that lie about their speed (issue 27's trust part): how much a liar gains and
the honest jobs lose, with the daemon's trust bounds (core/row_trust.py) and without.

    python benchmarks/bench_liars.py --policy max_min_fairness --seeds 0,1,2

A cluster of 4 V100, 4 P100 and 4 K80 runs 24 jobs of no known type (the weakest
prior the daemon has: its level is free, only ratios are bounded), all submitted at
once, each with its own true row (a table row, every cell jittered by a log-normal
factor, sigma 0.3) and 6 h of work at its true V100 rate. The scheduler learns each
row from what the jobs report (LEARNED knowledge, as the daemon). Job 0 then reports:

- honest: its true rate;
- 10x-v100: ten times its true rate whenever it runs on a V100, the truth elsewhere;
- 10x-k80: ten times on a K80 (a slow type: claiming it is where the liar is wanted);
- nothing: no report at all (stays on its prior);
- garbage: NaN, inf, -1 and 1e300 in turn.

Per scenario and seed: the liar's JCT over its JCT when honest (below 1: the lie
helped it) and the honest jobs' mean JCT over theirs in the honest run (above 1:
they lost); a run whose rounds fail (an unbounded report can make the policy's
LP fail) is counted as failed. "bounds" runs with TrustBounds() (the daemon's default), "none" takes
every report as it comes (what the bounds are for). Medians over the seeds are
printed, and everything with --json.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import sys
from dataclasses import replace
from typing import Any

from slurm_gavel.backends.cluster_spec import parse_cluster_spec
from slurm_gavel.backends.simulated import SimulatedCluster
from slurm_gavel.core.cluster_model import ClusterSnapshot
from slurm_gavel.core.explore import Exploration
from slurm_gavel.core.job_rows import Knowledge
from slurm_gavel.core.managed import UNTYPED
from slurm_gavel.core.model import Job
from slurm_gavel.core.round_settings import SIMULATOR_DEFAULTS
from slurm_gavel.core.round_types import SchedulerConfig
from slurm_gavel.core.row_trust import TrustBounds
from slurm_gavel.core.scheduler import run_round
from slurm_gavel.core.scheduler_state import SchedulerState
from slurm_gavel.core.throughputs import load_table

CLUSTER = "v100:1x4,p100:1x4,k80:1x4"
TYPES = ["ResNet-50 (batch size 64)", "A3C", "Transformer (batch size 64)", "LM (batch size 5)"]
SCENARIOS = ["honest", "10x-v100", "10x-k80", "nothing", "garbage"]
GARBAGE = [math.nan, math.inf, -1.0, 1e300]
LIAR = "0"


class Lying:
    """The simulated cluster, with job 0's reports replaced by the scenario's."""

    def __init__(self, inner: SimulatedCluster, scenario: str) -> None:
        self.inner = inner
        self.scenario = scenario
        self.n = 0

    def observe(self) -> ClusterSnapshot:
        snap = self.inner.observe()
        jobs = []
        for o in snap.jobs:
            if o.job.id == LIAR and o.measured_throughput is not None:
                o = replace(o, measured_throughput=self._claim(o.gpu_type, o.measured_throughput))
            jobs.append(o)
        return replace(snap, jobs=tuple(jobs))

    def _claim(self, gpu: str | None, rate: float) -> float | None:
        s = self.scenario
        if s == "nothing":
            return None
        if s == "garbage":
            self.n += 1
            return GARBAGE[self.n % len(GARBAGE)]
        if s.startswith("10x-") and gpu == s[4:]:
            return rate * 10
        return rate

    def act(self, placement: Any) -> Any:
        return self.inner.act(placement)


def run(
    policy: str,
    scenario: str,
    seed: int,
    bounds: TrustBounds | None,
    explore: Exploration | None = None,
) -> dict[str, float]:
    """One run; the liar's JCT, the others' mean JCT, and what restarts cost (also for
    benchmarks/bench_explore.py, which runs it with everyone honest)."""
    table = load_table()
    rng = random.Random(seed)
    nodes = parse_cluster_spec(CLUSTER)
    truth: dict[str, dict[str, float]] = {}
    jobs = []
    for i in range(24):
        row = table.row(TYPES[i % len(TYPES)], 1)
        truth[str(i)] = {t: row[t] * math.exp(rng.gauss(0, 0.3)) for t in ("v100", "p100", "k80")}
        steps = truth[str(i)]["v100"] * 6 * 3600
        jobs.append(Job(str(i), UNTYPED, 1, total_steps=steps, arrival_time=0.0))
    settings = SIMULATOR_DEFAULTS
    sim = SimulatedCluster(
        nodes, jobs, table, preemption_overhead_seconds=settings.preemption_overhead_seconds,
        true_rows=truth,
    )  # fmt: skip
    backend = Lying(sim, scenario)
    config = SchedulerConfig(
        table=table, policy=policy, settings=settings, knowledge=Knowledge.LEARNED,
        row_bounds=bounds, explore=explore,
    )  # fmt: skip
    state = SchedulerState()
    finish: dict[str, float] = {}
    restarts = 0
    while not sim.done():
        state, _ = run_round(state, backend, config)
        sim.advance(sim.clock + settings.round_seconds)
        for c in sim.completions:
            finish[c.job.id] = c.finish_time
            restarts += c.restarts
        sim.completions.clear()
    honest = [finish[j] for j in finish if j != LIAR]
    return {
        "liar_jct": finish[LIAR],
        "honest_mean_jct": statistics.mean(honest),
        "mean_jct": statistics.mean(finish.values()),
        "makespan": max(finish.values()),
        "restarts": restarts,
        "restart_gpu_hours": sim.restart_gpu_seconds / 3600,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--policy", default="max_min_fairness")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--json", action="store_true", help="every run's figures as JSON")
    args = ap.parse_args(argv)
    seeds = [int(s) for s in args.seeds.split(",")]
    out: dict[str, Any] = {"policy": args.policy, "cluster": CLUSTER, "runs": {}}
    for mode, bounds in (("bounds", TrustBounds()), ("none", None)):
        for seed in seeds:
            base = run(args.policy, "honest", seed, bounds)
            for scenario in SCENARIOS[1:]:
                runs = out["runs"].setdefault(f"{mode}/{scenario}", [])
                try:
                    r = run(args.policy, scenario, seed, bounds)
                except Exception as e:  # what an unbounded report can do to a round
                    runs.append({"seed": seed, "failed": f"{type(e).__name__}: {e}"[:200]})
                    continue
                runs.append(
                    {
                        "seed": seed,
                        "liar_jct_ratio": r["liar_jct"] / base["liar_jct"],
                        "honest_jct_ratio": r["honest_mean_jct"] / base["honest_mean_jct"],
                    }
                )
    if args.json:
        json.dump(out, sys.stdout, indent=1)
        print()
        return 0
    print(f"policy {args.policy}, {CLUSTER}, seeds {args.seeds}: median over seeds")
    print(f"{'bounds/scenario':<20} {'liar JCT / honest':>18} {'others JCT / honest':>20}")
    for key, runs in out["runs"].items():
        ok = [r for r in runs if "failed" not in r]
        failed = [r["failed"] for r in runs if "failed" in r]
        if ok:
            liar = statistics.median(r["liar_jct_ratio"] for r in ok)
            others = statistics.median(r["honest_jct_ratio"] for r in ok)
            print(f"{key:<20} {liar:>18.3f} {others:>20.3f}", end="")
        else:
            print(f"{key:<20} {'-':>18} {'-':>20}", end="")
        print(f"  ({len(failed)} of {len(runs)} runs failed: {failed[0][:80]})" if failed else "")
    return 0


if __name__ == "__main__":
    sys.exit(main())
