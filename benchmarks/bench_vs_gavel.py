"""Gavel's own simulator and ours, alternately, on the same trace and the same machine.

    python benchmarks/bench_vs_gavel.py --gavel-dir GAVEL/scheduler --gavel-python PY \
        [--case single1000|multi400 ...] [--repeats 3]

The issue's speed targets are ratios to figures Gavel's authors took on another
2-core machine (36 s and 20 s). This machine is shared and its speed moves by up to
2x from one hour to the next, so a figure of ours taken today against theirs taken
elsewhere says little. This script runs both simulators in turn, repeat after
repeat, so each pair of runs sees the same machine, and reports the median of each
and the median of the per-pair ratios.

Both read one trace file: our generator's trace (seed 0; Gavel's duration, type and
size distributions) written as a Gavel ``.trace``, so both simulate the same jobs
with the same arrival times; its 10-field rows are what Gavel's ``utils.parse_trace``
reads (our ``simulate --trace`` reads them too).

Gavel is not a dependency and not in this repository: point --gavel-dir at the
``scheduler/`` directory of a Gavel checkout (github.com/stanford-futuredata/gavel)
and --gavel-python at an interpreter with its requirements (cvxpy with ECOS, numpy,
grpcio and protobuf for its module-level RPC imports). benchmarks/README.md says
which Gavel files the quoted figures used and what had to be mended in them.

Both sides, per case (Gavel's setting for its simulator timings):
- 36 GPUs: 12 V100, 12 P100, 12 K80 in servers of 4; 360 s rounds; seed 0;
- one job per 2,400 s on average; heterogeneity-aware LAS (Gavel's
  ``max_min_fairness_perf`` with its default solver, ECOS; our ``max_min_fairness``);
- single1000: 1,000 single-GPU jobs; multi400: 400 jobs with the Philly size mix;
  single60 and multi60: 60 jobs of each kind, for quick checks;
- Gavel's driver ``scripts/drivers/simulate_scheduler_with_trace.py`` with the
  measurement window = every job of the trace; ours ``slurm-gavel simulate --trace``
  with preemption overhead 0 (Gavel's simulator charges none for a restart;
  ``--our-overhead 30`` gives our default instead), twice: as shipped (recompute on
  every job-set change) and with ``--min-reallocation-interval 1920``, the rule
  Gavel's simulator itself runs with (see VARIANTS).

The average JCTs are printed beside the times, from each simulator's own output, as
a check that both ran the whole trace. Wall time is taken by this script around
each child process (interpreter start and imports included on both sides). Exit
status 1 when any run fails.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

CASES: dict[str, dict[str, Any]] = {
    "single1000": {"jobs": 1000, "multi_gpu": False},
    "multi400": {"jobs": 400, "multi_gpu": True},
    # Small traces (the first 60 jobs of the same generator): quick to run on both
    # sides, and where the type-blind baseline's split over types showed first.
    "single60": {"jobs": 60, "multi_gpu": False},
    "multi60": {"jobs": 60, "multi_gpu": True},
}
INTERARRIVAL_S = 2400.0
GAVEL_JCT = re.compile(r"Average job completion time: ([0-9.]+) seconds")


def write_gavel_trace(case: str, path: Path) -> None:
    """Our seed-0 trace for the case as Gavel's 10-field .trace rows. Only the job type,
    steps, scale factor, priority, SLO and arrival matter to either simulator; command,
    working directory and steps argument are placeholders."""
    sys.path.insert(0, str(ROOT))
    from slurm_gavel.domain.throughputs import load_table
    from slurm_gavel.simulate.generate import generate_trace

    c = CASES[case]
    jobs = generate_trace(c["jobs"], INTERARRIVAL_S, load_table(None), multi_gpu=c["multi_gpu"])
    rows = [
        f"{j.job_type}\t-\t-\t-\t0\t{int(j.total_steps)}\t{j.scale_factor}\t1\t-1\t"
        f"{j.arrival_time:f}\n"
        for j in jobs
    ]
    path.write_text("".join(rows))


def gavel_argv(
    trace: Path, jobs: int, python: str, policy: str = "max_min_fairness_perf", seed: int = 0
) -> list[str]:
    """Gavel's trace driver on the case's cluster, run from GAVEL/scheduler."""
    return [
        python, "scripts/drivers/simulate_scheduler_with_trace.py", "-t", str(trace),
        "-p", policy, "-c", "12:12:12", "--num_gpus_per_server", "4:4:4",
        "--seed", str(seed), "--time_per_iteration", "360",
        "--throughputs_file", "simulation_throughputs.json", "-s", "0", "-e", str(jobs),
    ]  # fmt: skip


# Our two settings: the default (recompute on every job-set change, as Gavel's paper
# describes it) and the rule Gavel's simulator runs with (its scheduler's
# minimum_time_between_allocation_resets = 1,920 s: a change waits for that long
# after the last recomputation).
VARIANTS: dict[str, float] = {"ours": 0.0, "ours_1920": 1920.0}


def ours_argv(trace: Path, overhead: float, interval: float, summary: Path) -> list[str]:
    return [
        sys.executable, "-m", "slurm_gavel", "simulate", "--trace", str(trace),
        "--cluster", "v100:3x4,p100:3x4,k80:3x4", "--policy", "max_min_fairness",
        "--seed", "0", "--round-seconds", "360", "--preemption-overhead", str(overhead),
        "--min-reallocation-interval", str(interval), "--no-progress", "--json", str(summary),
    ]  # fmt: skip


def timed(argv: list[str], cwd: Path, timeout: float) -> tuple[float, int, str]:
    """Wall seconds, exit status and the combined output of one child process."""
    with tempfile.TemporaryFile("w+") as out:
        t0 = time.perf_counter()
        try:
            rc = subprocess.run(
                argv, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, timeout=timeout, check=False
            ).returncode
        except subprocess.TimeoutExpired:
            return time.perf_counter() - t0, 124, f"timed out after {timeout:.0f} s"
        wall = time.perf_counter() - t0
        out.seek(0)
        return wall, rc, out.read()


def last_line(text: str, limit: int = 300) -> str:
    """The last line of a child's output, for an error message."""
    return (text.strip().splitlines() or ["(no output)"])[-1][:limit]


def run_gavel(trace: Path, jobs: int, args: argparse.Namespace) -> dict[str, Any]:
    argv = gavel_argv(trace, jobs, args.gavel_python)
    wall, rc, text = timed(argv, args.gavel_dir, args.timeout)
    m = GAVEL_JCT.findall(text)
    if rc != 0 or not m:
        return {"error": f"Gavel exit {rc}: {last_line(text)}"}
    return {"wall_s": wall, "avg_jct_h": float(m[-1]) / 3600}


def run_ours(trace: Path, interval: float, args: argparse.Namespace) -> dict[str, Any]:
    summary = trace.with_suffix(".summary.json")
    argv = ours_argv(trace, args.our_overhead, interval, summary)
    wall, rc, text = timed(argv, ROOT, args.timeout)
    if rc != 0:
        return {"error": f"ours exit {rc}: {last_line(text)}"}
    s = json.loads(summary.read_text())
    if s["unfinished_jobs"]:
        return {"error": f"ours left {s['unfinished_jobs']} jobs unfinished"}
    return {"wall_s": wall, "avg_jct_h": s["avg_jct_s"] / 3600}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--gavel-dir", type=Path, required=True, help="GAVEL/scheduler")
    p.add_argument("--gavel-python", required=True, help="an interpreter with Gavel's needs")
    p.add_argument(
        "--case", action="append", choices=sorted(CASES), help="(default: single1000, multi400)"
    )
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--our-overhead", type=float, default=0.0, metavar="S")
    p.add_argument("--timeout", type=float, default=1800.0, help="seconds per run")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    args = p.parse_args(argv)
    args.gavel_dir = args.gavel_dir.resolve()
    driver = args.gavel_dir / "scripts/drivers/simulate_scheduler_with_trace.py"
    if not driver.is_file():
        p.error(f"--gavel-dir {args.gavel_dir}: no {driver.name} under scripts/drivers/")
    failed = False
    report: dict[str, Any] = {"load_before": os.getloadavg()[0], "cases": {}}
    work = Path(tempfile.mkdtemp(prefix="bench-vs-gavel-"))
    for case in args.case or ["single1000", "multi400"]:
        trace = work / f"{case}.trace"
        write_gavel_trace(case, trace)
        runs = []
        for i in range(args.repeats):
            run = {"gavel": run_gavel(trace.resolve(), CASES[case]["jobs"], args)}
            for name, interval in VARIANTS.items():
                run[name] = run_ours(trace.resolve(), interval, args)
            runs.append(run)
            if not args.json:
                shown = "; ".join(f"{k} {_show(v)}" for k, v in run.items())
                print(f"{case} repeat {i + 1}: {shown}", flush=True)
        summary: dict[str, Any] = {"runs": runs}
        for name in VARIANTS:
            ok = [q for q in runs if "error" not in q["gavel"] and "error" not in q[name]]
            failed |= len(ok) < len(runs)
            if not ok:
                continue
            g_s = [q["gavel"]["wall_s"] for q in ok]
            o_s = [q[name]["wall_s"] for q in ok]
            ratios = [g / o for g, o in zip(g_s, o_s, strict=True)]
            summary[name] = {
                "gavel_median_s": statistics.median(g_s),
                "median_s": statistics.median(o_s),
                "ratio_median": statistics.median(ratios),
                "ratio_range": (min(ratios), max(ratios)),
                "pairs": len(ok),
            }
            if not args.json:
                m = summary[name]
                print(
                    f"{case}, {name}: Gavel median {m['gavel_median_s']:.1f} s, {name} median "
                    f"{m['median_s']:.2f} s, Gavel/{name} {m['ratio_median']:.1f}x (pairs "
                    f"{m['ratio_range'][0]:.1f}-{m['ratio_range'][1]:.1f}x, {len(ok)} of "
                    f"{len(runs)})",
                    flush=True,
                )
        report["cases"][case] = summary
    report["load_after"] = os.getloadavg()[0]
    report["traces"] = str(work)
    if args.json:
        print(json.dumps(report, indent=1))
    return 1 if failed else 0


def _show(r: dict[str, Any]) -> str:
    if "error" in r:
        return f"FAILED ({r['error']})"
    return f"{r['wall_s']:.2f} s (avg JCT {r['avg_jct_h']:.2f} h)"


if __name__ == "__main__":
    sys.exit(main())
