"""Do our simulator and Gavel's agree? Both run the same trace, policy by policy.

    python benchmarks/crosscheck_gavel.py --gavel-dir GAVEL/scheduler --gavel-python PY \
        [--case single1000|multi400 ...] [--policy OURS ...] [--timeout S]

The same Gavel-format trace as bench_vs_gavel.py (our seed-0 generator, one job per
2,400 s, 36 GPUs in servers of 4, 360 s rounds) goes to Gavel's
``scripts/drivers/simulate_scheduler_with_trace.py`` and to our ``simulate()``, with
no restart overhead on our side (Gavel's simulator charges none). Printed per policy:
average JCT and makespan from each, and ours over Gavel's. Our max-min policies run
twice: as shipped, and with the second LP stage off (``second_stage=False``), which
is Gavel's single LP.

Two differences of Gavel's simulator can be switched off on our side:
- ``--our-min-interval 1920``: Gavel recomputes at most once per 1,920 s
  (``--min-reallocation-interval``); ours recomputes on every change by default.
- ``--no-spread-penalty``: Gavel runs a multi-GPU job at its consolidated speed
  wherever it is placed (its scheduler.py never reads the unconsolidated figures);
  ours at the table's unconsolidated speed when it spans servers, as the issue asks.

Randomised policies (Gavel's ``fifo`` and ``gandiva``) draw from other random
streams on the two sides, so only their distributions can agree: ``--gavel-seeds N``
runs Gavel's side of those two with seeds 0..N-1 and prints the mean (min-max).
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from bench_vs_gavel import (  # noqa: E402
    CASES,
    GAVEL_JCT,
    gavel_argv,
    last_line,
    timed,
    write_gavel_trace,
)

# ours -> Gavel's name for the same policy (Gavel's "_perf" = heterogeneity-aware)
POLICIES: dict[str, str] = {
    "max_min_fairness": "max_min_fairness_perf",
    "max_min_fairness_agnostic": "max_min_fairness",
    "max_min_fairness_packed": "max_min_fairness_packed",
    "finish_time_fairness": "finish_time_fairness_perf",
    "min_total_duration": "min_total_duration",
    "max_sum_throughput": "max_sum_throughput_perf",
    "fifo": "fifo_perf",
    "fifo_agnostic": "fifo",
    "isolated": "isolated",
    "gandiva": "gandiva",
}
STAGED = {"max_min_fairness", "max_min_fairness_agnostic", "max_min_fairness_packed"}
GAVEL_TOTAL = re.compile(r"Total duration: ([0-9.]+) seconds")


RANDOMISED = {"fifo", "gandiva"}  # Gavel's names


def run_gavel(trace: Path, jobs: int, policy: str, args: argparse.Namespace) -> dict[str, Any]:
    seeds = range(args.gavel_seeds if policy in RANDOMISED else 1)
    runs = [_run_gavel_once(trace, jobs, policy, seed, args) for seed in seeds]
    bad = [r for r in runs if "error" in r]
    if bad:
        return bad[0]
    out = {k: sum(r[k] for r in runs) / len(runs) for k in ("avg_jct_h", "makespan_h", "wall_s")}
    if len(runs) > 1:
        out["range"] = {k: (min(r[k] for r in runs), max(r[k] for r in runs))
                        for k in ("avg_jct_h", "makespan_h")}  # fmt: skip
    return out


def _run_gavel_once(
    trace: Path, jobs: int, policy: str, seed: int, args: argparse.Namespace
) -> dict[str, Any]:
    argv = gavel_argv(trace, jobs, args.gavel_python, policy, seed)
    wall, rc, text = timed(argv, args.gavel_dir, args.timeout)
    jct, total = GAVEL_JCT.findall(text), GAVEL_TOTAL.findall(text)
    if rc != 0 or not jct or not total:
        return {"error": f"exit {rc}: {last_line(text, 200)}", "wall_s": wall}
    return {"avg_jct_h": float(jct[-1]) / 3600, "makespan_h": float(total[-1]) / 3600,
            "wall_s": wall}  # fmt: skip


def run_ours(
    trace: Path, policy: str, second_stage: bool, min_interval: float, spread_penalty: bool
) -> dict[str, Any]:
    from slurm_gavel.backends.cluster_spec import parse_cluster_spec
    from slurm_gavel.core.round_settings import RoundSettings
    from slurm_gavel.domain.throughputs import load_table
    from slurm_gavel.simulate.engine import SimulationOptions, simulate
    from slurm_gavel.simulate.traces import load_trace

    table = load_table(None)
    if not spread_penalty:
        table = replace(table, unconsolidated={})  # a spread job runs at full speed
    settings = RoundSettings(
        round_seconds=360.0, preemption_overhead_seconds=0.0,
        min_reallocation_interval_seconds=min_interval,
    )  # fmt: skip
    opts = SimulationOptions(settings=settings, seed=0, progress=False, second_stage=second_stage)
    result = simulate(
        load_trace(trace, table),
        parse_cluster_spec("v100:3x4,p100:3x4,k80:3x4", table),
        table,
        policy,
        opts,
    )
    s = result.summary
    if s["unfinished_jobs"]:
        return {"error": f"{s['unfinished_jobs']} jobs unfinished"}
    return {"avg_jct_h": s["avg_jct_s"] / 3600, "makespan_h": s["makespan_s"] / 3600}


def _cell(r: dict[str, Any], key: str) -> str:
    if "error" in r:
        return "-"
    spread = r.get("range", {}).get(key)
    return f"{r[key]:.2f}" + (f" ({spread[0]:.2f}-{spread[1]:.2f})" if spread else "")


def _ratio(a: dict[str, Any], b: dict[str, Any], key: str) -> str:
    return "-" if "error" in a or "error" in b else f"{a[key] / b[key]:.3f}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--gavel-dir", type=Path, required=True, help="GAVEL/scheduler")
    p.add_argument("--gavel-python", required=True, help="an interpreter with Gavel's needs")
    p.add_argument("--case", action="append", choices=sorted(CASES), help="(default: all)")
    p.add_argument("--policy", action="append", choices=sorted(POLICIES), help="(default: all)")
    p.add_argument("--timeout", type=float, default=900.0, help="seconds per Gavel run")
    p.add_argument(
        "--gavel-seeds",
        type=int,
        default=1,
        metavar="N",
        help="run Gavel's randomised policies (fifo, gandiva) with seeds 0..N-1: mean (range)",
    )
    p.add_argument(
        "--our-min-interval",
        type=float,
        default=0.0,
        metavar="S",
        help="our min_reallocation_interval_seconds (1920 = the rule Gavel's simulator runs with)",
    )
    p.add_argument(
        "--no-spread-penalty",
        action="store_true",
        help="ours without the table's unconsolidated throughputs, as Gavel's simulator runs",
    )
    args = p.parse_args(argv)
    args.gavel_dir = args.gavel_dir.resolve()
    work = Path(tempfile.mkdtemp(prefix="crosscheck-gavel-"))
    print(f"traces in {work}")
    print("| trace | policy (Gavel's name) | avg JCT h: Gavel | ours | ours/Gavel "
          "| makespan h: Gavel | ours | ours/Gavel | Gavel wall s |")  # fmt: skip
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    failed = False
    for case in args.case or list(CASES):
        trace = work / f"{case}.trace"
        write_gavel_trace(case, trace)
        for ours in args.policy or list(POLICIES):
            g = run_gavel(trace, CASES[case]["jobs"], POLICIES[ours], args)
            variants = [(ours, True)] + (
                [(f"{ours} (stage 1 only)", False)] if ours in STAGED else []
            )
            for label, stage2 in variants:
                o = run_ours(trace, ours, stage2, args.our_min_interval, not args.no_spread_penalty)
                failed |= "error" in o
                gavel_note = g.get("error", f"{g['wall_s']:.1f}")
                print(
                    f"| {case} | {label} ({POLICIES[ours]}) | {_cell(g, 'avg_jct_h')} | "
                    f"{_cell(o, 'avg_jct_h')} | {_ratio(o, g, 'avg_jct_h')} | "
                    f"{_cell(g, 'makespan_h')} | {_cell(o, 'makespan_h')} | "
                    f"{_ratio(o, g, 'makespan_h')} | {gavel_note} |",
                    flush=True,
                )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
