"""Restart-aware rounds judged over a neighbourhood of restart budgets
(EXPERIMENTS.md, "Restart-aware rounds on real traces", "Where it stands").

The target for restart-aware rounds at a restart cost c: average JCT at most
1.03x Gavel's with free restarts, at most half of its restarts, and no worse makespan.
The makespan is one job's finish and moves by up to 10 % with any change to the rounds,
so a rule judged at the default budget alone (0.1) is judged on a draw. This script
runs every window at several budgets around it and counts, per window, the runs over
the target, with the medians and the GPU-hours lost to restarts:

    python benchmarks/restart_neighbourhood.py OUT \\
        --window philly-1017 philly-1017.csv v100:6x4,p100:6x4,k80:6x4 \\
        --window ali-130 ali-130.csv "$(cat ali-130.cluster)" ...

Windows are traces converted with `slurm-gavel trace philly|alibaba`
(benchmarks/restart_experiments.sh converts seven; the data is fetched by the user).
``--tree`` runs another checkout's code (a candidate rule) and ``--compare`` prints an
earlier OUT beside this one. Each simulation's summary lands in
OUT/<cost>-<budget>/<window>.json (Gavel with free restarts in OUT/gavel-free/), and
runs whose summary exists are not run again, so an interrupted sweep resumes; OUT
records the package's git tree, a hash of its uncommitted changes and the flags, and a sweep
of other code or flags is refused there (environment variables are not recorded).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shlex
import statistics
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]
BUDGETS = ["0.095", "0.097", "0.099", "0.1", "0.101", "0.103", "0.105"]
# the target against Gavel with free restarts
MAX_JCT, MAX_RESTARTS, MAX_MAKESPAN = 1.03, 0.5, 1.0


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out", type=Path, help="directory for the summaries")
    p.add_argument(
        "--window",
        nargs=3,
        action="append",
        required=True,
        metavar=("NAME", "TRACE", "CLUSTER"),
        help="a converted trace window and its --cluster spec (repeat)",
    )
    p.add_argument("--costs", nargs="+", default=["300", "120"], help="restart costs, s")
    p.add_argument("--budgets", nargs="+", default=BUDGETS, help="restart budgets")
    p.add_argument(
        "--flags",
        default="",
        help="more `simulate` flags for the restart-aware runs (--flags='--moldable')",
    )
    p.add_argument("--tree", type=Path, default=HERE, help="checkout whose code runs")
    p.add_argument("--python", default=sys.executable, help="interpreter with the deps")
    p.add_argument("-j", "--jobs", type=int, default=2, help="simulations at a time")
    p.add_argument("--compare", type=Path, help="an earlier OUT to print beside this one")
    return p.parse_args(argv)


# one simulation: (trace, cluster, restart cost, more flags, summary path)
Task = tuple[str, str, str, list[str], Path]


def simulate(args: argparse.Namespace, task: Task) -> str | None:
    """Run one simulation unless its summary exists; the error text if it failed."""
    trace, cluster, cost, extra, out = task
    if out.exists():
        return None
    out.parent.mkdir(parents=True, exist_ok=True)
    cmd = [args.python, "-m", "slurm_gavel", "simulate", "--no-progress", "--no-wall-time"]
    cmd += ["--trace", str(Path(trace).resolve()), "--cluster", cluster]
    cmd += ["--preemption-overhead", cost, "--policy", "max_min_fairness", *extra]
    cmd += ["--json", str(out.resolve())]
    r = subprocess.run(cmd, cwd=args.tree, capture_output=True, text=True, check=False)
    if r.returncode != 0:
        out.unlink(missing_ok=True)
        return f"{' '.join(map(shlex.quote, cmd))}: exit {r.returncode}: {r.stderr.strip()[-500:]}"
    return None


def provenance(args: argparse.Namespace) -> dict[str, str]:
    """What the summaries in OUT depend on besides the windows: the code (the committed
    slurm_gavel package's git tree and a hash of its uncommitted changes) and the flags."""

    def git(*cmd: str) -> str:
        r = subprocess.run(["git", *cmd], cwd=args.tree, capture_output=True, check=False)
        return r.stdout.decode(errors="replace") if r.returncode == 0 else "?"

    diff = hashlib.sha256(git("diff", "HEAD", "--", "slurm_gavel").encode()).hexdigest()[:16]
    package = git("rev-parse", "HEAD:slurm_gavel").strip()
    return {"tree": str(args.tree.resolve()), "package": package, "diff": diff, "flags": args.flags}


def check_provenance(args: argparse.Namespace) -> str | None:
    """Record what OUT's summaries come from, or say why OUT holds another sweep's
    (resuming there would mix two trees' results)."""
    now = provenance(args)
    path = args.out / "provenance.json"
    if path.exists():
        was = json.loads(path.read_text())
        if was != now:
            diff = ", ".join(
                f"{k} {was.get(k)!r} -> {v!r}" for k, v in now.items() if was.get(k) != v
            )
            return f"{args.out} holds a sweep of other code or flags ({diff}): use a new OUT"
        return None
    args.out.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(now, indent=1) + "\n")
    return None


def run_all(args: argparse.Namespace) -> list[str]:
    """Every simulation of the sweep, ``args.jobs`` at a time; the failures' texts."""
    tasks: list[Task] = []
    for name, trace, cluster in args.window:
        tasks.append((trace, cluster, "0", [], args.out / "gavel-free" / f"{name}.json"))
        for cost in args.costs:
            for b in args.budgets:
                extra = ["--restart-aware", "--restart-budget", b, *shlex.split(args.flags)]
                out = args.out / f"{cost}-{b}" / f"{name}.json"
                tasks.append((trace, cluster, cost, extra, out))
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        errors = pool.map(lambda t: simulate(args, t), tasks)
        return [e for e in errors if e]


def load(path: Path) -> dict:
    doc = json.loads(path.read_text())
    return doc[0] if isinstance(doc, list) else doc


def judge(out: Path, windows: list[str], cost: str, budgets: list[str]) -> dict[str, dict]:
    """Per window: the ratios to Gavel with free restarts at each budget, their medians,
    the runs over the target, GPU-hours lost and restarts summed over the budgets."""
    res: dict[str, dict] = {}
    for w in windows:
        ref = load(out / "gavel-free" / f"{w}.json")
        runs = []
        for b in budgets:
            s = load(out / f"{cost}-{b}" / f"{w}.json")
            jct = s["avg_jct_s"] / ref["avg_jct_s"]
            rst = s["preemptions"] / ref["preemptions"] if ref["preemptions"] else float("inf")
            mk = s["makespan_s"] / ref["makespan_s"]
            over = jct > MAX_JCT or rst > MAX_RESTARTS or mk > MAX_MAKESPAN
            run = {"budget": b, "jct": jct, "restarts": rst, "makespan": mk, "over": over}
            run.update(gpu_h_lost=s["restart_gpu_hours"], preemptions=s["preemptions"])
            runs.append(run)
        res[w] = {
            "runs": runs,
            "median_jct": statistics.median(r["jct"] for r in runs),
            "median_makespan": statistics.median(r["makespan"] for r in runs),
            "over": sum(r["over"] for r in runs),
            "gpu_h_lost": sum(r["gpu_h_lost"] for r in runs),
            "preemptions": sum(r["preemptions"] for r in runs),
        }
    return res


def cell(r: dict, n: int) -> str:
    medians = f"{r['median_jct']:.3f}x / {r['median_makespan']:.4f}x"
    return f"{medians}, {r['over']} of {n}, {r['gpu_h_lost']:,.0f}"


def at_default(r: dict) -> str:
    d = next((x for x in r["runs"] if float(x["budget"]) == 0.1), None)
    if d is None:
        return "-"
    star = "**" if d["over"] else ""
    return f"{star}{d['jct']:.3f}x / {d['restarts']:.2f}x / {d['makespan']:.4f}x{star}"


def table(cost: str, budgets: list[str], results: list[tuple[str, dict[str, dict]]]) -> str:
    n = len(budgets)
    head = " | ".join(
        f"{label}: at 0.1 (JCT / restarts / makespan) | "
        f"{label}: medians JCT / makespan, runs over, GPU-h lost"
        for label, _ in results
    )
    lines = [
        f"restart cost {cost} s, budgets {' '.join(budgets)}; ratios to Gavel with free "
        f"restarts; over: JCT > {MAX_JCT} or restarts > {MAX_RESTARTS} or makespan > "
        f"{MAX_MAKESPAN}",
        "",
        f"| window | {head} |",
        "|---" * (1 + 2 * len(results)) + "|",
    ]
    for w in results[0][1]:
        cells = " | ".join(f"{at_default(r[w])} | {cell(r[w], n)}" for _, r in results if w in r)
        lines.append(f"| {w} | {cells} |")
    tot = " | ".join(
        f" | {sum(v['over'] for v in r.values())} of {n * len(r)} over, "
        f"{sum(v['gpu_h_lost'] for v in r.values()):,.0f} GPU-h lost, "
        f"{sum(v['preemptions'] for v in r.values()):,} restarts"
        for _, r in results
    )
    lines.append(f"| all | {tot} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    mixed = check_provenance(args)
    if mixed is not None:
        print(f"restart_neighbourhood.py: {mixed}", file=sys.stderr)
        return 2
    errors = run_all(args)
    for e in errors:
        print(f"FAILED: {e}", file=sys.stderr)
    if errors:
        return 1
    windows = [w[0] for w in args.window]
    summary = {}
    for cost in args.costs:
        results = [(args.out.name, judge(args.out, windows, cost, args.budgets))]
        if args.compare is not None:
            results.insert(0, (args.compare.name, judge(args.compare, windows, cost, args.budgets)))
        summary[cost] = results[-1][1]
        print(table(cost, args.budgets, results), end="\n\n")
    (args.out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
