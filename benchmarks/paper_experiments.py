"""Gavel's central simulations (OSDI 2020, Figures 8-9 and the makespan runs) in our simulator.

    python benchmarks/paper_experiments.py --out benchmarks/results/paper   # everything
    python benchmarks/paper_experiments.py --quick --out /tmp/paper-quick    # smoke version
    python benchmarks/paper_experiments.py --out DIR --only single:5.6      # some points
    python benchmarks/paper_experiments.py --out DIR --report               # table + plots only

Cluster: 36 V100, 36 P100, 36 K80 in servers of 4. Continuous experiments: a
Poisson trace (seed 0; the quoted points also on seeds 1 and 2) at each input
rate, JCT averaged over jobs 4000-4999 in arrival order, the run stopping once
they have all finished (Gavel's window; simulate/window.py). Static experiments:
N multi-GPU jobs all at time 0, makespan. Rounds of 360 s, no preemption
overhead (Gavel's simulator charges none), except the points tagged "+overhead"
(the project's default 30 s).

Every point runs in its own child process (a fresh interpreter: no state carried
over, and --parallel can use more cores) and writes DIR/points/<key>.json; a point
whose JSON exists is skipped, so an interrupted run resumes where it stopped. Points
run in priority order: those Gavel's published notebook quotes first, then the rest
of the rate grid. At the end the script prints a Markdown table and writes the plots,
each PNG with its data beside it as CSV (same stem).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
CLUSTER = "v100:9x4,p100:9x4,k80:9x4"
HOUR = 3600.0

CONTINUOUS = [
    "max_min_fairness_agnostic",  # Gavel's "LAS" (its policy max_min_fairness)
    "max_min_fairness",  # Gavel's het-aware LAS (max_min_fairness_perf)
    "max_min_fairness_packed",  # het-aware LAS with space sharing
    "fifo_agnostic",  # Gavel's "fifo" (FIFOPolicy, mode 'base')
    "slurm_fifo",  # Slurm's FIFO + EASY backfill, whole jobs, no preemption
]
STATIC = ["fifo_agnostic", "min_total_duration", "fifo", "slurm_fifo"]

# Gavel's published notebook outputs (seed 0; hours): (experiment, rate or jobs) -> policy -> value
GAVEL = {
    ("single", 5.6): {
        "max_min_fairness_agnostic": 96.0,
        "max_min_fairness": 29.0,
        "max_min_fairness_packed": 19.6,
    },
    ("single", 4.4): {
        "max_min_fairness_agnostic": 23.8,
        "max_min_fairness": 17.5,
        "max_min_fairness_packed": 17.8,
    },
    ("multi", 2.6): {
        "max_min_fairness_agnostic": 70.5,
        "max_min_fairness": 36.4,
        "max_min_fairness_packed": 30.5,
    },
    ("static", 700): {"fifo_agnostic": 619.5, "min_total_duration": 244.2},
}
# The "sizefirst" experiments draw multi-GPU traces as Gavel's generate_job does by
# default (size first, then a type that has it: ~1.9 GPUs per job instead of ~1.65);
# Gavel's figures are the same runs, so they are compared with both.
for (_e, _x), _v in list(GAVEL.items()):
    if _e in ("multi", "static"):
        GAVEL[(f"{_e}_sizefirst", _x)] = _v
SIZE_FIRST = ("multi_sizefirst", "static_sizefirst")
# the order of the report's tables
EXPERIMENT_ORDER = {
    "single": 0,
    "multi": 1,
    "multi_sizefirst": 2,
    "static": 3,
    "static_sizefirst": 4,
}


@dataclass(frozen=True)
class Point:
    # single | multi | multi_sizefirst (continuous, avg JCT) or static | static_sizefirst
    # (makespan)
    experiment: str
    x: float  # jobs/hour (continuous) or number of jobs (static)
    policy: str
    overhead_s: float = 0.0
    # False: Gavel's single max-min LP (PolicyOptions.second_stage), an ablation
    second_stage: bool = True
    # the trace's (and the policies') seed; Gavel's published figures are seed 0, the
    # other seeds show how much of a difference to them is one trace's luck
    seed: int = 0

    @property
    def key(self) -> str:
        tag = "" if self.overhead_s == 0 else f"+overhead{self.overhead_s:g}"
        tag += "" if self.second_stage else "+stage1only"
        tag += "" if self.seed == 0 else f"+seed{self.seed}"
        return f"{self.experiment}-{self.x:g}-{self.policy}{tag}"


@dataclass(frozen=True)
class Plan:
    window: tuple[int, int]  # measured jobs [first, end) of each continuous trace
    trace_jobs: int  # jobs generated per continuous trace (arrivals go on past the window)
    cluster: str
    points: list[Point]


def full_plan() -> Plan:
    quoted = [("single", 5.6), ("single", 4.4), ("multi", 2.6)]
    first = [Point(e, r, p) for e, r in quoted for p in CONTINUOUS[:3]]
    first += [Point("static", n, p) for n in (100, 700) for p in STATIC[:2]]
    first += [Point(e, r, p) for e, r in quoted for p in CONTINUOUS[3:]]
    first += [Point("static", n, p) for n in (100, 700) for p in STATIC[2:]]
    first.append(Point("single", 4.4, "max_min_fairness", overhead_s=30.0))
    # The rest of the curves, sparsest first so that an interrupted run still spans
    # both experiments; space sharing (4-5x the cost) after the others, and the
    # rates past saturation last (the queue, and with it each round, keeps growing).
    grid = [("single", 2.0), ("multi", 1.0), ("single", 3.2), ("multi", 2.0)]
    grid += [("single", 5.0), ("multi", 1.5), ("single", 1.0), ("multi", 0.5)]
    cheap = [p for p in CONTINUOUS if p != "max_min_fairness_packed"]
    rest = [Point(e, r, p) for e, r in grid for p in cheap]
    rest += [Point(e, r, "max_min_fairness_packed") for e, r in grid]
    rest += [Point(e, r, p) for e, r in (("single", 6.0), ("multi", 3.0)) for p in CONTINUOUS]
    # Gavel's size-first multi-GPU mix at its quoted points, then its curve
    rest += [Point("multi_sizefirst", 2.6, p) for p in CONTINUOUS[:3]]
    rest += [
        Point("multi_sizefirst", r, p)
        for r in (1.0, 2.0, 1.5, 0.5, 2.6)
        for p in CONTINUOUS
        if r != 2.6 or p in CONTINUOUS[3:]
    ]
    rest += [Point("static_sizefirst", 700, p) for p in STATIC[:2]]
    # Ablation: how much of the gap to Gavel is our second LP stage?
    rest += [
        Point(e, r, p, second_stage=False)
        for e, r in (("multi_sizefirst", 2.6), ("single", 4.4), ("single", 5.6))
        for p in CONTINUOUS[1:3]
    ]
    # Other traces of the quoted points (seeds 1 and 2): the spread across traces. Not
    # agnostic LAS at single 5.6 (past saturation: a run takes hours, a lower bound).
    rest += [
        Point(e, r, p, seed=seed)
        for seed in (1, 2)
        for e, r in (("single", 4.4), ("multi_sizefirst", 2.6), ("single", 5.6), ("multi", 2.6))
        for p in CONTINUOUS[:3]
        if (e, r, p) != ("single", 5.6, CONTINUOUS[0])
    ]
    # ... and the second-stage ablation on those traces, where the gap to Gavel is
    rest += [
        Point("multi_sizefirst", 2.6, p, second_stage=False, seed=seed)
        for seed in (1, 2)
        for p in CONTINUOUS[1:3]
    ]
    return Plan((4000, 5000), 15000, CLUSTER, first + rest)


def quick_plan() -> Plan:
    """Same cluster and policies, a short window early in short traces: minutes, not hours."""
    points = [Point(e, r, p) for e, r in (("single", 4.4), ("multi", 2.6)) for p in CONTINUOUS]
    points += [Point("static", 60, p) for p in STATIC]
    return Plan((150, 250), 1500, CLUSTER, points)


# ---- one point, in a child process ------------------------------------------------------


def run_point(point: Point, plan: Plan) -> dict[str, Any]:
    from slurm_gavel.backends.cluster_spec import parse_cluster_spec
    from slurm_gavel.core.round_settings import SIMULATOR_DEFAULTS
    from slurm_gavel.domain.throughputs import load_table
    from slurm_gavel.simulate.engine import SimulationOptions, simulate
    from slurm_gavel.simulate.generate import generate_trace
    from slurm_gavel.simulate.window import Window, apply_window

    table = load_table()
    nodes = parse_cluster_spec(plan.cluster, table)
    opts = SimulationOptions(
        settings=replace(SIMULATOR_DEFAULTS, preemption_overhead_seconds=point.overhead_s),
        seed=point.seed,
        progress=False,
        second_stage=point.second_stage,
    )
    t0 = time.perf_counter()
    n = plan.trace_jobs
    size_first = point.experiment in SIZE_FIRST
    static = point.experiment.startswith("static")
    if static:
        jobs = generate_trace(
            int(point.x), 1.0, table, seed=point.seed, multi_gpu=True, size_first=size_first
        )
        jobs = [replace(j, arrival_time=0.0) for j in jobs]  # all queued at the start
        summary = simulate(jobs, nodes, table, point.policy, opts).summary
    else:
        multi = point.experiment.startswith("multi")
        window = Window(*plan.window)
        n = plan.trace_jobs
        while True:
            # The same seed gives the same first n jobs whatever n, so a longer trace
            # only adds arrivals behind the window.
            jobs = generate_trace(
                n, HOUR / point.x, table, seed=point.seed, multi_gpu=multi, size_first=size_first
            )
            opts = replace(opts, stop_when_completed=window.ids(jobs))
            summary = simulate(jobs, nodes, table, point.policy, opts).summary
            summary = apply_window(summary, jobs, window)
            # Arrivals ran out before the window finished (an overloaded policy): the
            # load fell off and the JCTs are optimistic. Longer trace, up to 60,000 jobs.
            if not summary["measure_window"]["trace_exhausted"] or n >= 60000:
                break
            n *= 2
    summary.pop("jct_s")  # thousands of floats; the percentiles stay
    return {
        "key": point.key,
        "experiment": point.experiment,
        "x": point.x,
        "policy": point.policy,
        "preemption_overhead_s": point.overhead_s,
        "second_stage": point.second_stage,
        "seed": point.seed,
        "cluster": plan.cluster,
        "window": list(plan.window) if not static else None,
        "trace_jobs": n if not static else int(point.x),
        "process_wall_s": round(time.perf_counter() - t0, 1),
        "summary": summary,
    }


def _claim(lock: Path) -> bool:
    """One driver per point: several drivers may share DIR (e.g. a second one started
    with --only to run some points sooner). A lock whose driver is gone is stale."""
    try:
        fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        try:
            os.kill(int(lock.read_text() or 0), 0)
            return False  # its driver is alive: it runs the point
        except (ProcessLookupError, ValueError):
            lock.unlink(missing_ok=True)
            return _claim(lock)
    os.write(fd, str(os.getpid()).encode())
    os.close(fd)
    return True


def _child(point: Point, plan: Plan, out: Path, timeout_s: float) -> dict[str, Any] | None:
    path = out / "points" / f"{point.key}.json"
    if path.exists():
        return json.loads(path.read_text())
    path.parent.mkdir(parents=True, exist_ok=True)
    lock = path.with_suffix(".running")
    if not _claim(lock):
        return None
    spec = json.dumps({"point": point.__dict__, "plan": {**plan.__dict__, "points": []}})
    t0 = time.perf_counter()
    try:
        # the child writes the result itself: it survives the death of this driver
        done = subprocess.run(
            [sys.executable, __file__, "--child", spec, "--child-out", str(path)],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
    except subprocess.TimeoutExpired:
        print(f"  {point.key}: timed out after {timeout_s:.0f} s (not written)", flush=True)
        return None
    finally:
        lock.unlink(missing_ok=True)
    if done.returncode != 0:
        print(f"  {point.key}: failed\n{done.stderr[-2000:]}", flush=True)
        return None
    result = json.loads(path.read_text())
    s = result["summary"]
    value = s["makespan_s"] if point.experiment.startswith("static") else s["avg_jct_s"]
    print(f"  {point.key}: {value / HOUR:.1f} h in {time.perf_counter() - t0:.0f} s", flush=True)
    return result


# ---- report -------------------------------------------------------------------------------


def load_results(out: Path, folder: str = "points") -> dict[str, dict[str, Any]]:
    """folder "exhausted": points whose trace ran out before the window finished,
    moved aside by hand; the table lists them as lower bounds, the plots leave them out."""
    paths = sorted((out / folder).glob("*.json"))
    return {p.stem: json.loads(p.read_text()) for p in paths}


def _metric(r: dict[str, Any]) -> float | None:
    s = r["summary"]
    v = s["makespan_s"] if r["experiment"].startswith("static") else s["avg_jct_s"]
    return None if v is None else v / HOUR


def markdown_table(results: dict[str, dict[str, Any]]) -> str:
    rows = [
        "| experiment | x | policy | overhead s | ours h | Gavel h | jobs measured | "
        "restarts | util | wall s | note |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in sorted(
        results.values(), key=lambda r: (EXPERIMENT_ORDER[r["experiment"]], r["x"], r["key"])
    ):
        s, v = r["summary"], _metric(r)
        gavel = GAVEL.get((r["experiment"], r["x"]), {}).get(r["policy"])
        if r["preemption_overhead_s"] or r.get("seed", 0):
            gavel = None
        note = []
        w = s.get("measure_window")
        if w and w["trace_exhausted"]:
            note.append("trace ran out: a lower bound")
        if not r.get("second_stage", True):
            note.append("ablation: single-stage LP (Gavel's)")
        if r.get("seed", 0):
            note.append(f"trace seed {r['seed']}")
        if s["unfinished_jobs"]:
            note.append(f"{s['unfinished_jobs']} unfinished")
        rows.append(
            f"| {r['experiment']} | {r['x']:g} | {r['policy']} | {r['preemption_overhead_s']:g} "
            f"| {'-' if v is None else f'{v:.1f}'} | {'-' if gavel is None else gavel} "
            f"| {s['jobs']} | {s['preemptions']} | {s['utilization']:.2f} "
            f"| {r['process_wall_s']} | {', '.join(note)} |"
        )
    return "\n".join(rows) + "\n"


def seed_table(results: dict[str, dict[str, Any]]) -> str:
    """Points run on several traces (seeds): each seed's value, their mean and range,
    beside Gavel's seed-0 figure."""
    groups: dict[tuple[str, float, str], dict[int, float]] = {}
    for r in results.values():
        jct_h = _metric(r)
        if r["preemption_overhead_s"] or jct_h is None:
            continue
        if r["summary"].get("measure_window", {}).get("trace_exhausted"):
            continue
        policy = r["policy"] + ("" if r.get("second_stage", True) else " (stage 1 only)")
        groups.setdefault((r["experiment"], r["x"], policy), {})[r.get("seed", 0)] = jct_h
    multi = {k: v for k, v in groups.items() if len(v) > 1}
    if not multi:
        return ""
    seeds = sorted({s for v in multi.values() for s in v})
    rows = [
        "| experiment | x | policy | " + " | ".join(f"seed {s} h" for s in seeds)
        + " | mean h | min-max | Gavel (seed 0) h |",
        "|---|---|---|" + "---|" * len(seeds) + "---|---|---|",
    ]  # fmt: skip
    for (e, x, pol), v in sorted(
        multi.items(), key=lambda kv: (EXPERIMENT_ORDER[kv[0][0]], *kv[0][1:])
    ):
        vals = list(v.values())
        gavel = GAVEL.get((e, x), {}).get(pol.removesuffix(" (stage 1 only)"))
        rows.append(
            f"| {e} | {x:g} | {pol} | "
            + " | ".join(f"{v[s]:.1f}" if s in v else "-" for s in seeds)
            + f" | {sum(vals) / len(vals):.1f} | {min(vals):.1f}-{max(vals):.1f} "
            f"| {'-' if gavel is None else gavel} |"
        )
    return "\n".join(rows) + "\n"


def _minor_label(v: float, _pos: int) -> str:
    """Label the minor ticks 20, 30, 50 (and 200, 300, 500) of a log axis, no others."""
    lead = v / 10 ** int(f"{v:e}".split("e")[1])
    return f"{v:g}" if round(lead) in (2, 3, 5) else ""


def plots(results: dict[str, dict[str, Any]], out: Path) -> list[Path]:
    import matplotlib
    import matplotlib.ticker

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from slurm_gavel.simulate.plots import save  # the PNG and its data beside it as CSV

    written = []
    base = [
        r
        for r in results.values()
        if not r["preemption_overhead_s"] and r.get("second_stage", True) and not r.get("seed", 0)
    ]
    titles = {  # experiment -> (title, file name)
        "single": ("Single-GPU jobs (Gavel Fig. 8 setting)", "single_gpu_jct_vs_rate.png"),
        "multi": ("Multi-GPU jobs (Gavel Fig. 9 setting)", "multi_gpu_jct_vs_rate.png"),
        "multi_sizefirst": (
            "Multi-GPU jobs, Gavel's size-first mix",
            "multi_gpu_sizefirst_jct_vs_rate.png",
        ),
    }
    for exp, (title, name) in titles.items():
        mine = [r for r in base if r["experiment"] == exp]
        if not mine:
            continue
        fig, ax = plt.subplots(figsize=(7, 4.5), dpi=100)
        rows: list[list[Any]] = []
        for i, policy in enumerate(CONTINUOUS):
            pts = sorted((r["x"], _metric(r)) for r in mine if r["policy"] == policy)
            pts = [(x, y) for x, y in pts if y is not None]
            if not pts:
                continue
            color = f"C{i}"
            ax.plot(*zip(*pts, strict=True), marker="o", color=color, label=policy)
            ref = [(x, v[policy]) for (e, x), v in GAVEL.items() if e == exp and policy in v]
            if ref:
                xs, ys = zip(*ref, strict=True)
                ax.scatter(xs, ys, marker="x", s=70, color=color)
            published = dict(ref)
            rows += [[policy, x, y, published.get(x)] for x, y in pts]
        ax.set_xlabel("input job rate (jobs/hour)")
        first, end = mine[0]["window"]
        ax.set_ylabel(f"average JCT of jobs {first}-{end - 1} (hours)")
        ax.set_title(f"{title}; x = Gavel's published value")
        ax.set_yscale("log")
        # plain hours on the log axis (20, 50, 100), not 2x10^1
        ax.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}"))
        ax.yaxis.set_minor_formatter(matplotlib.ticker.FuncFormatter(_minor_label))
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8, loc="best")
        header = ["policy", "jobs_per_hour", "avg_jct_h", "gavel_avg_jct_h"]
        written.append(save(fig, out / name, header, rows))
    static = [r for r in base if r["experiment"] == "static"]
    if static:
        sizes = sorted({r["x"] for r in static})
        fig, ax = plt.subplots(figsize=(7, 4.5), dpi=100)
        width = 0.8 / len(STATIC)
        rows = []
        for i, policy in enumerate(STATIC):
            for j, n in enumerate(sizes):
                got = [_metric(r) for r in static if r["x"] == n and r["policy"] == policy]
                if got and got[0] is not None:
                    gavel_h = GAVEL.get(("static", n), {}).get(policy)
                    rows.append([policy, n, got[0], gavel_h])
                    ax.bar(
                        j + i * width,
                        got[0],
                        width,
                        color=f"C{i}",
                        label=policy if j == 0 else None,
                    )
        for j, n in enumerate(sizes):
            for i, policy in enumerate(STATIC):
                gavel_h = GAVEL.get(("static", n), {}).get(policy)
                if gavel_h is not None:
                    ax.scatter(j + i * width, gavel_h, marker="x", s=70, color="black")
        ax.set_xticks([j + 0.4 - width / 2 for j in range(len(sizes))])
        ax.set_xticklabels([f"{n:g} jobs" for n in sizes])
        ax.set_ylabel("makespan (hours)")
        ax.set_title("Static multi-GPU traces; x = Gavel's published value")
        ax.legend(fontsize=8)
        ax.grid(True, axis="y", alpha=0.3)
        header = ["policy", "jobs", "makespan_h", "gavel_makespan_h"]
        written.append(save(fig, out / "static_makespan.png", header, rows))
    return written


# ---- main ---------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--out", default="benchmarks/results/paper", help="results directory")
    ap.add_argument("--quick", action="store_true", help="small smoke version (a few minutes)")
    ap.add_argument(
        "--only",
        action="append",
        default=[],
        metavar="PREFIX",
        help="run only points whose key starts with PREFIX, e.g. single-5.6 (repeatable)",
    )
    ap.add_argument("--parallel", type=int, default=1, help="points run at once (default 1)")
    ap.add_argument("--point-timeout", type=float, default=3600.0, metavar="S")
    ap.add_argument("--report", action="store_true", help="run nothing: table and plots only")
    ap.add_argument(
        "--trace-jobs",
        type=int,
        metavar="N",
        help="jobs per continuous trace (default 15000; a point whose trace runs out is rerun "
        "with twice as many, up to 60,000: this skips attempts known to be too short)",
    )
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--child-out", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)

    if args.child:
        spec = json.loads(args.child)
        plan = Plan(**{**spec["plan"], "window": tuple(spec["plan"]["window"])})
        result = run_point(Point(**spec["point"]), plan)
        tmp = Path(args.child_out + ".tmp")
        tmp.write_text(json.dumps(result, indent=1) + "\n")
        tmp.replace(args.child_out)  # atomic: a point file is complete or absent
        return 0

    plan = quick_plan() if args.quick else full_plan()
    if args.trace_jobs:
        plan = replace(plan, trace_jobs=args.trace_jobs)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if not args.report:
        todo = [p for p in plan.points if not args.only or p.key.startswith(tuple(args.only))]
        print(
            f"{len(todo)} points, {args.parallel} at a time, results in {out}/points/", flush=True
        )
        with ThreadPoolExecutor(max_workers=max(1, args.parallel)) as pool:
            list(pool.map(lambda p: _child(p, plan, out, args.point_timeout), todo))
    results = load_results(out)
    exhausted = {f"{k} (exhausted)": r for k, r in load_results(out, "exhausted").items()}
    sys.stdout.write(markdown_table({**results, **exhausted}))
    spread = seed_table(results)
    if spread:
        sys.stdout.write("\nAcross traces (seeds):\n\n" + spread)
    for path in plots(results, out):
        print(f"plot: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
