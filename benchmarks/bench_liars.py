"""Jobs that lie about their speed: how much a liar gains and the honest jobs lose, for
every policy that reads throughput rows, with the daemon's trust bounds
(core/learned_rows/row_trust.py) and without.

    python benchmarks/bench_liars.py                  # the full grid (see --help)
    python benchmarks/bench_liars.py --policies finish_time_fairness --kinds untyped \\
        --lies 10x-all,drip --seeds 0 --json

A cluster of 4 V100, 4 P100 and 4 K80 runs ``--jobs`` jobs (default 16), all submitted at
once, each with its own true row (a table row, every cell jittered by a log-normal
factor, sigma 0.3) and ``--hours`` of work at its true V100 rate (default 3). The jobs
are of one *kind*: ``untyped`` (no known job type: the weakest prior the daemon has, its
row estimated from the others') or ``typed`` (its table row is the prior). The scheduler
learns each row from what the jobs report (LEARNED knowledge, as the daemon). Job 0 then
reports (its *lie*):

- honest: its true rate (the baseline every other lie is compared with);
- jitter: its rate, steps done and total steps times 1.0001 (a unit 0.01 % smaller),
  the control: no lie worth the name, so what it changes is how far the schedule moves
  when one job's row moves at all (a policy's LP has many optimal vertices; which one
  the solver returns decides who runs where, and with it every later round). A lie's
  figures within the control's are noise. (Its rate alone would move nothing: with
  the trust bounds a cell is what the job's steps show, not the rate it claims.);
- 10x-all, 0.1x-all: ten times (a tenth of) its true rate on every GPU type;
- 10x-v100, 10x-k80: ten times on one type (a fast one; a slow one, where claiming
  speed is how to be wanted), the truth elsewhere;
- drip: its true rate times step_factor (1.5) more with every report (a lie that never
  moves a cell by more than a round's bound), up to the rate cap;
- 1.1x-all: 10% above the truth everywhere (a lie that hides in measurement noise);
- 10x-units: ten times its rate *and* its steps done *and* its declared total steps (a
  consistent change of the unit a step is counted in; the scheduler cannot tell it
  from a job whose steps are ten times smaller);
- half-steps: half its steps done, and a rate to match, its total steps true (a job
  that looks slower and further from its end than it is: the steps are its word);
- no-rate: its steps done but no rate (the report's steps_per_s left out);
- nothing: no report at all: no rate and no steps done (for a typed job the daemon's
  estimate from the time it received, daemon/progress_learning.py's estimate_steps; a job of
  no known type has none), so it stays on its prior;
- garbage: NaN, inf, -1, 0, 1e300, 1e6 x the truth, a string and True in turn.

Policies: every policy that reads rows (see POLICIES): max-min fairness, finish-time
fairness, min total duration, hierarchical max-min (jobs in three accounts, weights
1:2:1, the liar in the first), min cost (AWS-like prices, every other typed job with
a loose SLO) and max-min fairness with space sharing (packed).

Per (policy, kind, lie, seed): the liar's JCT over its JCT when honest (below 1: the
lie helped it) and the honest jobs' mean JCT over theirs in the honest run (above 1:
they lost). A run whose rounds fail (an unbounded report can make an LP fail) is
counted as failed. ``--bounds daemon`` runs with TrustBounds() (the daemon's default),
``none`` takes every report as it comes. The table shows the worst seed: the lowest
liar ratio and the highest honest ratio; --json has every run.

The full grid (6 policies x 2 kinds x 13 lies x 3 seeds: 468 runs and 36 honest
baselines, bounds on) took 4 minutes with ``--workers 2`` on an idle 2-core machine
and 15 on a shared one (each run is one process's work; the figures do not depend on
the worker count). ``--start-allowance`` sets TrustBounds.start_allowance_s.

The control says how far a schedule moves for nothing: where a lie's figure is beyond
2 % but within what the control moved in the same (policy, kind), three seeds cannot
tell the lie from the schedule's sensitivity. Such a cell still misses the bound
(``beyond_2_percent``); ``beyond_2_percent_and_the_control`` lists the misses beyond
the control too, and more seeds (``--seeds 0,1,2,3,4,5,6,7,8,9`` with ``--policies``
and ``--kinds`` of those cells) are how to judge the rest.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import sys
import time
from collections.abc import Iterable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from typing import Any

from slurm_gavel.backends.cluster_spec import parse_cluster_spec
from slurm_gavel.backends.simulated import SimulatedCluster
from slurm_gavel.core.learned_rows.explore import Exploration
from slurm_gavel.core.learned_rows.job_rows import Knowledge
from slurm_gavel.core.learned_rows.learned_rows_settings import LearnedRowsSettings
from slurm_gavel.core.learned_rows.row_trust import TrustBounds
from slurm_gavel.core.plugin_settings import SIMULATOR_PLUGINS
from slurm_gavel.core.round_config import SchedulerConfig
from slurm_gavel.core.round_settings import SIMULATOR_DEFAULTS
from slurm_gavel.core.scheduler import run_round
from slurm_gavel.core.scheduler_state import SchedulerState
from slurm_gavel.daemon.progress_learning import estimate_steps
from slurm_gavel.domain.cluster_model import ClusterSnapshot, JobState
from slurm_gavel.domain.comment_grammar import UNTYPED
from slurm_gavel.domain.model import Job
from slurm_gavel.domain.throughputs import load_table

CLUSTER = "v100:1x4,p100:1x4,k80:1x4"
GPU_TYPES = ("v100", "p100", "k80")
TYPES = ["ResNet-50 (batch size 64)", "A3C", "Transformer (batch size 64)", "LM (batch size 5)"]
POLICIES = [
    "max_min_fairness",
    "finish_time_fairness",
    "min_total_duration",
    "hierarchical_max_min_fairness",
    "min_cost",
    "max_min_fairness_packed",
]
KINDS = ["untyped", "typed"]
LIES = [
    "honest",
    "jitter",
    "10x-all",
    "0.1x-all",
    "10x-v100",
    "10x-k80",
    "drip",
    "1.1x-all",
    "10x-units",
    "half-steps",
    "no-rate",
    "nothing",
    "garbage",
]
SCENARIOS = LIES  # the old name (benchmarks/bench_explore.py and docs)
GARBAGE: list[Any] = [math.nan, math.inf, -1.0, 0.0, 1e300, "1e6x", "fast", True]
LIAR = "0"
ACCOUNTS = {"a": 1.0, "b": 2.0, "c": 1.0}
PRICES = {"v100": 2.48, "p100": 1.46, "k80": 0.45}  # dollars per GPU-hour (AWS-like)
UNITS = 10.0  # the factor of the 10x-units lie
JITTER = 1.0001  # the control: a "lie" too small to matter
HALF = 0.5  # the half-steps lie: steps done (and rate) this share of the truth
# Lies that scale the rate, the steps done and the total steps alike (a unit): the
# control is one, since with the trust bounds a job's cell follows its steps, not its
# claimed rate, and only a unit moves it.
UNIT_LIES = {"10x-units": UNITS, "jitter": JITTER}


class Lying:
    """The simulated cluster, with job 0's reports replaced by the lie's."""

    def __init__(self, inner: SimulatedCluster, lie: str, step_factor: float) -> None:
        self.inner = inner
        self.lie = lie
        self.step_factor = step_factor
        self.n = 0
        self.job: Job | None = None  # the liar as the scheduler sees it (10x-units)
        self.state: SchedulerState | None = None  # the rounds' (for "nothing")

    def observe(self) -> ClusterSnapshot:
        snap = self.inner.observe()
        jobs = []
        for o in snap.jobs:
            if o.job.id == LIAR and o.state is not JobState.DONE:
                if self.lie == "nothing":
                    o = replace(o, steps_done=None, measured_throughput=None)
                unit = UNIT_LIES.get(self.lie)
                if unit is not None:
                    if self.job is None:  # one object: the round's memo compares by identity
                        self.job = replace(o.job, total_steps=o.job.total_steps * unit)
                    o = replace(
                        o,
                        job=self.job,
                        steps_done=None if o.steps_done is None else o.steps_done * unit,
                    )
                if self.lie == "half-steps" and o.steps_done is not None:
                    o = replace(o, steps_done=o.steps_done * HALF)
                if o.measured_throughput is not None:
                    o = replace(
                        o, measured_throughput=self._claim(o.gpu_type, o.measured_throughput)
                    )
            jobs.append(o)
        snap = replace(snap, jobs=tuple(jobs))
        if self.lie == "nothing" and self.state is not None:
            # what the daemon does for a job that reports no steps (daemon/hooked_backend.py)
            accts = self.state.jobs
            snap = estimate_steps(
                snap,
                {j: a.received_s for j, a in accts.items()},
                {j: a.restarts for j, a in accts.items()},
                self.inner.table,
                SIMULATOR_DEFAULTS.preemption_overhead_seconds,
            )
        return snap

    def _claim(self, gpu: str | None, rate: float) -> Any:
        lie = self.lie
        self.n += 1
        if lie in ("nothing", "no-rate"):
            return None
        if lie == "garbage":
            g = GARBAGE[self.n % len(GARBAGE)]
            return rate * 1e6 if g == "1e6x" else g
        if lie == "drip":
            return min(rate * self.step_factor**self.n, 1e7)
        if lie in ("10x-all", "10x-units"):
            return rate * 10
        if lie == "half-steps":
            return rate * HALF
        if lie == "0.1x-all":
            return rate / 10
        if lie == "1.1x-all":
            return rate * 1.1
        if lie == "jitter":
            return rate * JITTER
        if lie.startswith("10x-") and gpu == lie[4:]:
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
    *,
    kind: str = "untyped",
    jobs: int = 24,
    hours: float = 6.0,
) -> dict[str, float]:
    """One run; the liar's JCT, the others' mean JCT, and what restarts cost (also for
    benchmarks/bench_explore.py, which runs it with everyone honest)."""
    table = load_table()
    rng = random.Random(seed)
    nodes = parse_cluster_spec(CLUSTER)
    truth: dict[str, dict[str, float]] = {}
    trace = []
    accounts = list(ACCOUNTS)
    for i in range(jobs):
        job_type = TYPES[i % len(TYPES)]
        row = table.row(job_type, 1)
        truth[str(i)] = {t: row[t] * math.exp(rng.gauss(0, 0.3)) for t in GPU_TYPES}
        steps = truth[str(i)]["v100"] * hours * 3600
        trace.append(
            Job(
                str(i),
                UNTYPED if kind == "untyped" else job_type,
                1,
                total_steps=steps,
                arrival_time=0.0,
                account=accounts[i % len(accounts)],
                # min_cost: every other typed job must finish within 8x its work's
                # length (an untyped job's prior can be 15x off its level before it
                # reports, so an SLO on it would make the first rounds infeasible)
                slo=hours * 3600 * 8
                if policy == "min_cost" and kind == "typed" and i % 2
                else None,
            )
        )
    settings = SIMULATOR_DEFAULTS
    sim = SimulatedCluster(
        nodes, trace, table, preemption_overhead_seconds=settings.preemption_overhead_seconds,
        true_rows=truth,
    )  # fmt: skip
    step = (bounds or TrustBounds()).step_factor
    backend = Lying(sim, scenario, step)
    config = SchedulerConfig(
        table=table, policy=policy, settings=settings, knowledge=Knowledge.LEARNED,
        plugins=replace(SIMULATOR_PLUGINS, learned_rows=LearnedRowsSettings(bounds, explore)),
        accounts=ACCOUNTS, prices=PRICES,
    )  # fmt: skip
    state = SchedulerState()
    backend.state = state
    finish: dict[str, float] = {}
    restarts = 0
    rounds = 0
    while not sim.done():
        state, _ = run_round(state, backend, config)
        sim.advance(sim.clock + settings.round_seconds)
        rounds += 1
        if rounds > 100_000:
            raise RuntimeError("the trace does not finish")
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


def _one(task: tuple[str, str, str, int, str, int, float, float | None]) -> dict[str, Any]:
    policy, kind, lie, seed, mode, jobs, hours, allowance = task
    bounds = None
    if mode == "daemon":
        bounds = TrustBounds() if allowance is None else TrustBounds(start_allowance_s=allowance)
    try:
        r = run(policy, lie, seed, bounds, kind=kind, jobs=jobs, hours=hours)
    except Exception as e:  # what an unbounded report can do to a round
        return {"failed": f"{type(e).__name__}: {e}"[:200]}
    return r


def grid(
    policies: Iterable[str],
    kinds: Iterable[str],
    lies: Iterable[str],
    seeds: Iterable[int],
    mode: str = "daemon",
    jobs: int = 16,
    hours: float = 3.0,
    workers: int = 1,
    allowance: float | None = None,
) -> dict[str, Any]:
    """Every (policy, kind, lie, seed) run and its honest baseline; per (policy, kind,
    lie) the worst seed's ratios (``worst``: liar_jct_ratio is the lowest, the
    honest jobs' the highest; None where a run failed)."""
    lies = [x for x in lies if x != "honest"]
    cells = [(p, k, s) for p in policies for k in kinds for s in seeds]
    tasks = [
        (p, k, lie, s, mode, jobs, hours, allowance)
        for p, k, s in cells
        for lie in ["honest", *lies]
    ]
    if workers > 1:
        with ProcessPoolExecutor(workers) as pool:
            results = list(pool.map(_one, tasks))
    else:
        results = [_one(t) for t in tasks]
    by = {t[:4]: r for t, r in zip(tasks, results, strict=True)}
    out: dict[str, Any] = {"runs": [], "worst": []}
    for p in policies:
        for k in kinds:
            for lie in lies:
                seen = []
                for s in seeds:
                    base, r = by[(p, k, "honest", s)], by[(p, k, lie, s)]
                    row: dict[str, Any] = {"policy": p, "kind": k, "lie": lie, "seed": s}
                    if "failed" in base or "failed" in r:
                        row["failed"] = base.get("failed") or r.get("failed")
                    else:
                        row["liar_jct_ratio"] = r["liar_jct"] / base["liar_jct"]
                        row["honest_jct_ratio"] = r["honest_mean_jct"] / base["honest_mean_jct"]
                    out["runs"].append(row)
                    seen.append(row)
                ok = [r for r in seen if "failed" not in r]
                failed = len(seen) - len(ok)
                out["worst"].append(
                    {
                        "policy": p,
                        "kind": k,
                        "lie": lie,
                        "liar_jct_ratio": min(r["liar_jct_ratio"] for r in ok) if ok else None,
                        "honest_jct_ratio": max(r["honest_jct_ratio"] for r in ok) if ok else None,
                        "failed": failed,
                    }
                )
    return out


def within(worst: Iterable[dict[str, Any]], tolerance: float = 0.02) -> list[str]:
    """What breaks the bound: no lie gains the liar more than ``tolerance`` of its JCT
    or costs the honest jobs more than that of theirs, and no run fails."""
    bad = []
    for w in worst:
        where = f"{w['policy']}/{w['kind']}/{w['lie']}"
        if w["failed"]:
            bad.append(f"{where}: {w['failed']} run(s) failed")
        elif w["liar_jct_ratio"] < 1 - tolerance:
            bad.append(f"{where}: liar's JCT x{w['liar_jct_ratio']:.3f}")
        elif w["honest_jct_ratio"] > 1 + tolerance:
            bad.append(f"{where}: honest jobs' JCT x{w['honest_jct_ratio']:.3f}")
    return bad


def control_noise(worst: Iterable[dict[str, Any]]) -> dict[tuple[str, str], float]:
    """Per (policy, kind), how far the control ("jitter": one job's row 0.01 % off)
    moved the liar's or the honest jobs' JCT, worst seed: the schedule's own
    sensitivity, below which a lie's figure cannot be told from noise."""
    out: dict[tuple[str, str], float] = {}
    for w in worst:
        if w["lie"] == "jitter" and not w["failed"]:
            out[(w["policy"], w["kind"])] = max(
                1.0 - w["liar_jct_ratio"], w["honest_jct_ratio"] - 1.0, 0.0
            )
    return out


def beyond_control(worst: Iterable[dict[str, Any]], tolerance: float = 0.02) -> list[str]:
    """The cells of within()'s list whose figure is also beyond what the control moved
    in the same (policy, kind): a lie's effect, not the schedule's sensitivity (the
    others need more seeds to tell; they still miss the bound). Without a control run
    every miss counts."""
    worst = list(worst)
    noise = control_noise(worst)
    bad = []
    for w, line in zip(worst, _misses(worst, tolerance), strict=True):
        if line is None:
            continue
        floor = noise.get((w["policy"], w["kind"]), 0.0)
        if w["failed"] or max(1.0 - w["liar_jct_ratio"], w["honest_jct_ratio"] - 1.0) > floor:
            bad.append(line)
    return bad


def _misses(worst: list[dict[str, Any]], tolerance: float) -> list[str | None]:
    out: list[str | None] = []
    for w in worst:
        got = within([w], tolerance)
        out.append(got[0] if got else None)
    return out


def _names(text: str, known: list[str]) -> list[str]:
    got = [x for x in text.split(",") if x]
    for x in got:
        if x not in known:
            raise SystemExit(f"unknown {x!r}; known: {', '.join(known)}")
    return got


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--policies", default=",".join(POLICIES))
    ap.add_argument("--policy", help="one policy (the same as --policies NAME)")
    ap.add_argument("--kinds", default=",".join(KINDS))
    ap.add_argument("--lies", default=",".join(LIES[1:]))
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--jobs", type=int, default=16)
    ap.add_argument("--hours", type=float, default=3.0, help="each job's work at its V100 rate")
    ap.add_argument(
        "--bounds", choices=["daemon", "none"], default="daemon",
        help="daemon: TrustBounds() as the daemon runs; none: every report as it comes",
    )  # fmt: skip
    ap.add_argument(
        "--start-allowance", type=float, default=None, metavar="S",
        help="TrustBounds.start_allowance_s (default: the daemon's, 30 s)",
    )  # fmt: skip
    ap.add_argument("--workers", type=int, default=1, help="processes running the runs")
    ap.add_argument("--json", action="store_true", help="every run's figures as JSON")
    args = ap.parse_args(argv)
    policies = _names(args.policy or args.policies, POLICIES)
    kinds = _names(args.kinds, KINDS)
    lies = _names(args.lies, LIES)
    seeds = [int(s) for s in args.seeds.split(",")]
    t0 = time.perf_counter()
    out = grid(
        policies, kinds, lies, seeds, args.bounds, args.jobs, args.hours, args.workers,
        args.start_allowance,
    )  # fmt: skip
    out["seconds"] = round(time.perf_counter() - t0, 1)
    out["setup"] = {
        "cluster": CLUSTER, "jobs": args.jobs, "hours": args.hours, "seeds": seeds,
        "bounds": args.bounds, "start_allowance_s": args.start_allowance,
    }  # fmt: skip
    out["beyond_2_percent"] = within(out["worst"])
    out["control_noise"] = {f"{p}/{k}": v for (p, k), v in control_noise(out["worst"]).items()}
    out["beyond_2_percent_and_the_control"] = beyond_control(out["worst"])
    if args.json:
        json.dump(out, sys.stdout, indent=1)
        print()
        return 0
    print(
        f"{CLUSTER}, {args.jobs} jobs x {args.hours:g} h, seeds {args.seeds}, bounds "
        f"{args.bounds}: worst seed ({out['seconds']:.0f} s)"
    )
    print(f"{'policy':<30} {'kind':<8} {'lie':<10} {'liar JCT / honest':>18} {'others':>8}")
    for w in out["worst"]:
        liar, others = w["liar_jct_ratio"], w["honest_jct_ratio"]
        cells = (
            "-".rjust(18) + " " + "-".rjust(8) if liar is None else f"{liar:>18.3f} {others:>8.3f}"
        )
        fail = f"  ({w['failed']} of {len(seeds)} runs failed)" if w["failed"] else ""
        print(f"{w['policy']:<30} {w['kind']:<8} {w['lie']:<10} {cells}{fail}")
    bad = out["beyond_2_percent"]
    print("beyond 2%: " + ("; ".join(bad) if bad else "none"))
    real = out["beyond_2_percent_and_the_control"]
    print("beyond 2% and the control's own move: " + ("; ".join(real) if real else "none"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
