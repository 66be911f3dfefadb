"""Time the simulator on seeded generated traces (the issue's speed targets).

    python benchmarks/bench_simulate.py --case single1000 --policy max_min_fairness --repeats 3
    python benchmarks/bench_simulate.py --jobs 2000 --interarrival 600 --cluster v100:2x4 ...

Cases (presets of --jobs/--interarrival/--cluster/--multi-gpu):

- single1000: 1,000 single-GPU jobs, one per 2,400 s (40 min) on average, on
  36 GPUs (v100/p100/k80, 3 nodes of 4 each): Gavel's own simulator takes 36 s.
- multi400: 400 jobs with the Philly scale-factor mix (1/2/4/8 GPUs), one per
  2,400 s, on the same 36 GPUs: Gavel's simulator takes 20 s.
- large10k: 10,000 single-GPU jobs, one per 30 s, on 2,048 GPUs (171, 171 and
  170 nodes of 4 V100, P100, K80): the <= 5 min target.

Every repeat runs in a fresh child process, so the figures include nothing a
previous run warmed up. Per run:

- process_seconds: wall time of the whole child, from before its first import
  to after the summary (what `time slurm-gavel simulate ...` measures, less
  argument parsing and the text table);
- simulate_seconds: wall time of simulate() alone (no interpreter start, no
  imports, no trace generation);
- solve_seconds / mechanism_seconds: the policy's and the mechanism's share;
- peak RSS (ru_maxrss) of the child, and with --rss-at N1,N2,... the peak RSS
  when the N-th job completed (memory against completed jobs).

Quoted figures are the median of --repeats runs. Exit status 1 when a run fails.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from typing import Any

T_START = time.perf_counter()  # before any heavy import: counts toward process_seconds

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CASES: dict[str, dict[str, Any]] = {
    "single1000": {
        "jobs": 1000, "interarrival": 2400.0, "cluster": "v100:3x4,p100:3x4,k80:3x4",
        "multi_gpu": False,
    },
    "multi400": {
        "jobs": 400, "interarrival": 2400.0, "cluster": "v100:3x4,p100:3x4,k80:3x4",
        "multi_gpu": True,
    },
    "large10k": {
        "jobs": 10000, "interarrival": 30.0, "cluster": "v100:171x4,p100:171x4,k80:170x4",
        "multi_gpu": False,
    },
}  # fmt: skip


def _peak_rss_mib() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def worker(args: argparse.Namespace) -> dict[str, Any]:
    """Runs in the child: generate the trace, simulate, report figures as JSON."""
    sys.path.insert(0, ROOT)
    from slurm_gavel.backends.cluster_spec import parse_cluster_spec
    from slurm_gavel.core.round_settings import RoundSettings
    from slurm_gavel.domain.throughputs import load_table
    from slurm_gavel.simulate import collector as metrics_mod
    from slurm_gavel.simulate.engine import SimulationOptions, simulate
    from slurm_gavel.simulate.generate import generate_trace

    rss_at: dict[int, float] = {}
    marks = sorted(int(n) for n in args.rss_at.split(",") if n) if args.rss_at else []
    if marks:
        # Benchmark-only hook: note the peak RSS when the N-th job completes.
        original = metrics_mod.MetricsCollector.on_completion

        def on_completion(self: Any, c: Any) -> None:
            original(self, c)
            done = len(self.jct)
            if done in marks:
                rss_at[done] = _peak_rss_mib()

        metrics_mod.MetricsCollector.on_completion = on_completion  # type: ignore[method-assign]

    table = load_table(None)
    nodes = parse_cluster_spec(args.cluster, table)
    jobs = generate_trace(
        args.jobs, args.interarrival, table, seed=args.seed, multi_gpu=args.multi_gpu
    )
    true_rows = {}
    if args.row_spread is not None:  # each job its own true row, as simulate --row-spread
        from slurm_gavel.simulate.true_rows import draw_true_rows

        types = list(dict.fromkeys(n.gpu_type for n in nodes))
        true_rows = draw_true_rows(jobs, table, types, args.row_spread, args.seed)
    settings = RoundSettings(
        round_seconds=args.round_seconds, preemption_overhead_seconds=args.preemption_overhead
    )
    from slurm_gavel.core.learned_rows.job_rows import Knowledge

    opts = SimulationOptions(
        settings=settings,
        seed=args.seed,
        progress=False,
        knowledge=Knowledge(args.knowledge),
    )
    t0 = time.perf_counter()
    result = simulate(jobs, nodes, table, args.policy, opts, true_rows)
    sim = time.perf_counter() - t0
    s, m = result.summary, result.metrics
    return {
        "policy": args.policy,
        "jobs": args.jobs,
        "completed": s["jobs"],
        "unfinished": s["unfinished_jobs"],
        "process_seconds": time.perf_counter() - T_START,
        "simulate_seconds": sim,
        "solve_seconds": m.solve_seconds,
        "mechanism_seconds": m.mechanism_seconds,
        "rounds": m.rounds,
        "reallocations": m.reallocations,
        "restarts": s["preemptions"],
        "avg_jct_h": None if s["avg_jct_s"] is None else s["avg_jct_s"] / 3600,
        "makespan_h": s["makespan_s"] / 3600,
        "utilization": s["utilization"],
        "peak_rss_mib": _peak_rss_mib(),
        "peak_rss_mib_at_completed": {str(k): v for k, v in sorted(rss_at.items())},
    }


def run_child(args: argparse.Namespace) -> dict[str, Any]:
    cmd = [
        sys.executable, os.path.abspath(__file__), "--worker",
        "--policy", args.policy, "--jobs", str(args.jobs),
        "--interarrival", str(args.interarrival), "--cluster", args.cluster,
        "--seed", str(args.seed), "--round-seconds", str(args.round_seconds),
        "--preemption-overhead", str(args.preemption_overhead),
        "--rss-at", args.rss_at or "", "--knowledge", args.knowledge,
    ] + (["--multi-gpu"] if args.multi_gpu else []) + (
        ["--row-spread", str(args.row_spread)] if args.row_spread is not None else []
    )  # fmt: skip
    try:
        done = subprocess.run(
            cmd, capture_output=True, text=True, timeout=args.timeout, check=False
        )
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {args.timeout:.0f} s"}
    if done.returncode != 0:
        tail = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
        return {"error": f"exit {done.returncode}: {tail}"}
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


MEDIAN_KEYS = ("process_seconds", "simulate_seconds", "solve_seconds", "mechanism_seconds",
               "peak_rss_mib")  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--case", choices=sorted(CASES), help="a preset (overrides the four below)")
    p.add_argument("--jobs", type=int, default=1000)
    p.add_argument("--interarrival", type=float, default=2400.0, help="mean seconds")
    p.add_argument("--cluster", default="v100:3x4,p100:3x4,k80:3x4")
    p.add_argument("--multi-gpu", action="store_true")
    p.add_argument("--policy", default="max_min_fairness")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--round-seconds", type=float, default=360.0)
    p.add_argument("--preemption-overhead", type=float, default=30.0)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument(
        "--row-spread",
        type=float,
        default=None,
        help="SIGMA: every job its own true row (simulate --row-spread; 0.3 in the learning runs)",
    )
    p.add_argument(
        "--knowledge",
        default="learned",
        choices=["learned", "oracle", "type-blind"],
        help="what the scheduler knows of the true rows (simulate --knowledge)",
    )
    p.add_argument("--rss-at", default="", help="N1,N2,...: peak RSS when the N-th job completes")
    p.add_argument("--timeout", type=float, default=3600.0, help="seconds per run")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.case and not args.worker:
        for k, v in CASES[args.case].items():
            setattr(args, k, v)
    if args.worker:
        print(json.dumps(worker(args)))
        return 0

    runs = [run_child(args) for _ in range(args.repeats)]
    ok = [r for r in runs if "error" not in r]
    out: dict[str, Any] = {
        "case": args.case,
        "policy": args.policy,
        "jobs": args.jobs,
        "interarrival": args.interarrival,
        "cluster": args.cluster,
        "multi_gpu": args.multi_gpu,
        "row_spread": args.row_spread,
        "knowledge": args.knowledge,
        "runs": runs,
    }
    if ok:
        out["median"] = {k: statistics.median(r[k] for r in ok) for k in MEDIAN_KEYS}
    if args.json:
        print(json.dumps(out, indent=1))
    else:
        print(format_result(out))
    return 0 if len(ok) == len(runs) else 1


def format_result(out: dict[str, Any]) -> str:
    head = (
        f"{out['policy']}: {out['jobs']} {'multi' if out['multi_gpu'] else 'single'}-GPU jobs, "
        f"one per {out['interarrival']:g} s, cluster {out['cluster']}"
        + (f", own rows spread {out['row_spread']:g} ({out['knowledge']})"
           if out["row_spread"] is not None else "")
    )  # fmt: skip
    lines = [head]
    for r in out["runs"]:
        if "error" in r:
            lines.append(f"  run failed: {r['error']}")
            continue
        lines.append(
            f"  process {r['process_seconds']:.2f} s, simulate {r['simulate_seconds']:.2f} s "
            f"(solve {r['solve_seconds']:.2f}, mechanism {r['mechanism_seconds']:.2f}), "
            f"{r['rounds']} rounds, {r['reallocations']} reallocations, "
            f"{r['completed']} done, {r['restarts']} restarts, "
            f"avg JCT {r['avg_jct_h'] or 0:.2f} h, util {r['utilization']:.2f}, "
            f"peak RSS {r['peak_rss_mib']:.0f} MiB"
            + (f", RSS at completed {r['peak_rss_mib_at_completed']}"
               if r["peak_rss_mib_at_completed"] else "")
        )  # fmt: skip
    med = out.get("median")
    if med:
        lines.append(
            "  median: process {process_seconds:.2f} s, simulate {simulate_seconds:.2f} s, "
            "solve {solve_seconds:.2f} s, mechanism {mechanism_seconds:.2f} s, "
            "peak RSS {peak_rss_mib:.0f} MiB".format(**med)
        )
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
