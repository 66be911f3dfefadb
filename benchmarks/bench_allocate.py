"""Time one allocation policy on a seeded synthetic problem.

    python benchmarks/bench_allocate.py --policy max_min_fairness_packed --jobs 1024 \
        --gpus-per-type 256 --pairs --repeats 5 --reference-check

The problem comes from slurm_gavel.simulate.synthetic.random_problem (Philly scale-factor
mix, jobs drawn uniformly from the shipped throughput table, fixed seed). Each
measurement runs in a fresh child process, so peak RSS is that of one process
that built the problem and ran the policy (ru_maxrss), not of this driver.

solve_seconds is the policy's own Allocation.solve_seconds: model build + solve,
as slurm_gavel.policies.allocate records it (no process start, no import, no
problem generation). The figure quoted is the median of --repeats calls in one
process. --reference-check also runs the policy's reference path
(PolicyOptions(reference=True), one call, its own process and time limit) and
reports the relative objective gap |fast - ref| / |ref|. --exact-check runs the
same policy with every decomposition (policies/solvers/dw.py and its users)
switched off, i.e. the HiGHS LPs of before the per-job rows, and reports the
gap to that: the check that the fast path is exact (packed: the class-pair column
generation of mm_lp.py instead of mm_pack_groups.py's partner-group LP).

Which path the LPs took (Allocation.decomposed / .fallbacks, filled by
policies/solvers/solve_paths.py): `lp_path` is "decomposition" (certified),
"fallback" (a decomposition handed an LP to the plain LP) or "plain LP", for each
call; `decomposed` names the last call's decomposed LPs and `fallbacks` lists every
call's fallbacks with their reason.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def jittered(problem: Any, spread: float, seed: int) -> Any:
    """Scale every throughput by its own factor in [1 - spread, 1 + spread].

    A stress case: no two jobs are alike any more (not even up to a constant factor),
    so no classes form and the fast path solves a job-level LP (with pairs: one
    variable per job pair and type).
    """
    import dataclasses

    import numpy as np

    rng = np.random.default_rng(seed + 1)
    jobs = tuple(
        dataclasses.replace(
            j, throughput={t: v * float(rng.uniform(1 - spread, 1 + spread))
                           for t, v in j.throughput.items()}
        )
        for j in problem.jobs
    )  # fmt: skip
    return dataclasses.replace(problem, jobs=jobs)


def no_decomposition() -> None:
    """Switch off every decomposition path (dw.py and its users): each LP goes to HiGHS
    whole, as before the per-job rows. The "exact" check compares against this."""
    from slurm_gavel.policies.solvers import ftf_dw, hier_dw, hier_parametric, mm_lp, mm_pack_groups

    mm_lp.DW_MIN_COLUMNS = 10**12
    mm_lp.SUM_DW_MIN_COLUMNS = 10**12
    ftf_dw.DW_MIN_JOBS = 10**12
    hier_dw.DW_MIN_CELLS = 10**12
    hier_parametric.DW_MIN_CELLS = 10**12
    mm_pack_groups.GROUP_MIN_CLASSES = 10**12  # packed: the class-pair LP (mm_lp.py)


def worker(args: argparse.Namespace) -> dict[str, Any]:
    """Runs in the child: build the problem, call the policy, report figures as JSON."""
    sys.path.insert(0, ROOT)
    from slurm_gavel.policies import PolicyOptions, allocate, get_policy
    from slurm_gavel.simulate.synthetic import random_problem

    started = time.perf_counter()
    problem = random_problem(
        args.jobs,
        args.gpus_per_type,
        seed=args.seed,
        with_pairs=args.pairs,
        weights=tuple(float(w) for w in args.weights.split(",")),
        accounts={a: float(w) for a, w in (kv.split("=") for kv in args.accounts.split(",") if kv)},
    )
    if args.jitter > 0:
        problem = jittered(problem, args.jitter, args.seed)
    if args.prices:
        import dataclasses

        prices = {t: float(v) for t, v in (kv.split("=") for kv in args.prices.split(","))}
        problem = dataclasses.replace(problem, prices=prices)
    build = time.perf_counter() - started
    get_policy(args.policy)  # import the module (and cvxpy, if it does) outside the timing
    if args.worker == "exact":
        no_decomposition()
    rss_before = _peak_rss_mib()
    options = PolicyOptions(seed=args.seed, reference=args.worker == "reference")
    times: list[float] = []
    alloc = None
    cpu: list[float] = []
    paths: list[str] = []
    fallbacks: list[dict[str, Any]] = []
    for call in range(args.repeats):
        c0 = time.process_time()
        alloc = allocate(problem, args.policy, options)
        cpu.append(time.process_time() - c0)
        times.append(alloc.solve_seconds)
        paths.append(lp_path(alloc))
        fallbacks += [
            {"call": call, "lp": f.lp, "reason": f.reason, "detail": f.detail}
            for f in alloc.fallbacks
        ]
    assert alloc is not None
    violations = alloc.violations(problem)
    values = [alloc.effective_throughput(problem, j.id) for j in problem.jobs]
    return {
        "path": args.worker,
        "policy": args.policy,
        "jobs": args.jobs,
        "gpus_per_type": args.gpus_per_type,
        "gpu_types": len(problem.cluster),
        "pairs": args.pairs,
        "pair_entries": len(problem.pair_throughputs),
        "seed": args.seed,
        "jitter": args.jitter,
        "weights": args.weights,
        "prices": args.prices,
        "solve_seconds": times,
        "solve_seconds_median": statistics.median(times),
        # CPU seconds of this process over the same calls (all threads): on a loaded
        # machine closer to what the call costs than the wall time
        "cpu_seconds": cpu,
        "cpu_seconds_median": statistics.median(cpu),
        "objective": alloc.objective,
        "lp_path": paths,
        "decomposed": list(alloc.decomposed),
        "fallbacks": fallbacks,
        "job_pairs_in_allocation": len(alloc.pairs),
        "violations": len(violations),
        "problem_build_seconds": build,
        "peak_rss_mib_before_solve": rss_before,
        "peak_rss_mib": _peak_rss_mib(),
        # each job's steps/s under the allocation: --exact-check compares them job by job
        "job_values": values if args.exact_check else None,
    }


def lp_path(alloc: Any) -> str:
    """One call's path: "fallback" if any LP went from the decomposition to the plain
    LP, else "decomposition" if any was decomposed, else "plain LP"."""
    if alloc.fallbacks:
        return "fallback"
    return "decomposition" if alloc.decomposed else "plain LP"


def run_child(args: argparse.Namespace, path: str, repeats: int, timeout: float) -> dict[str, Any]:
    cmd = [
        sys.executable,
        os.path.abspath(__file__),
        "--worker", path,
        "--policy", args.policy,
        "--jobs", str(args.jobs),
        "--gpus-per-type", str(args.gpus_per_type),
        "--repeats", str(repeats),
        "--seed", str(args.seed),
        "--jitter", str(args.jitter),
        "--weights", args.weights, "--prices", args.prices, "--accounts", args.accounts,
    ] + (["--pairs"] if args.pairs else [])  # fmt: skip
    cmd += ["--exact-check"] if args.exact_check else []
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return {"path": path, "error": f"timed out after {timeout:.0f} s"}
    if done.returncode != 0:
        tail = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
        return {"path": path, "error": f"exit {done.returncode}: {tail}"}
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--policy", required=True)
    p.add_argument("--jobs", type=int, required=True)
    p.add_argument("--gpus-per-type", type=int, required=True)
    p.add_argument("--pairs", action="store_true", help="include pair throughputs (packing)")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--jitter",
        type=float,
        default=0.0,
        help="scale every throughput by its own random factor in [1-J, 1+J] (no two jobs alike)",
    )
    p.add_argument(
        "--weights",
        default="1",
        help="comma-separated priority weights drawn uniformly per job (default 1)",
    )
    p.add_argument(
        "--prices",
        default="",
        help="TYPE=DOLLARS_PER_GPU_HOUR,... for min_cost (e.g. v100=3.06,p100=1.46,k80=0.9)",
    )
    p.add_argument(
        "--accounts",
        default="",
        help="NAME=WEIGHT,... Slurm accounts, assigned to jobs in turn (hierarchical policy; "
        "e.g. a=2,b=1,c=0.5)",
    )
    p.add_argument("--reference-check", action="store_true")
    p.add_argument(
        "--reference-timeout", type=float, default=900.0, help="seconds for the reference run"
    )
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument(
        "--exact-check",
        action="store_true",
        help="also run the same HiGHS LPs with every decomposition switched off (one call, "
        "own process) and print the relative objective gap to it",
    )
    p.add_argument("--worker", choices=["fast", "reference", "exact"], help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        print(json.dumps(worker(args)))
        return 0

    fast = run_child(args, "fast", args.repeats, timeout=3600)
    out: dict[str, Any] = {"fast": fast}
    if args.reference_check:
        ref = out["reference"] = run_child(args, "reference", 1, timeout=args.reference_timeout)
        if _comparable(fast, ref):
            out["relative_gap"] = _relative_gap(fast, ref)
    if args.exact_check:
        exact = out["exact"] = run_child(args, "exact", 1, timeout=args.reference_timeout)
        if _comparable(fast, exact):
            out["exact_gap"] = _relative_gap(fast, exact)
            # job by job (steps/s): the largest relative difference, and of the sum
            fv, ev = fast["job_values"], exact["job_values"]
            out["exact_job_gap"] = max(
                (abs(f - e) / abs(e) for f, e in zip(fv, ev, strict=True) if e), default=0.0
            )
            out["exact_sum_gap"] = abs(sum(fv) - sum(ev)) / (abs(sum(ev)) or 1.0)
    if args.json:
        print(json.dumps(out, indent=1))
    else:
        print(format_result(args, out))
    return 1 if "error" in fast else 0


def format_result(args: argparse.Namespace, out: dict[str, Any]) -> str:
    fast = out["fast"]
    head = (
        f"{args.policy}: {args.jobs} jobs, {args.gpus_per_type} GPUs per type"
        f"{', pairs' if args.pairs else ''}, seed {args.seed}"
        f"{f', jitter {args.jitter}' if args.jitter else ''}"
        f"{f', weights {args.weights}' if args.weights != '1' else ''}"
        f"{f', accounts {args.accounts}' if args.accounts else ''}"
    )
    if "error" in fast:
        return f"{head}\n  fast path failed: {fast['error']}"
    lines = [
        head,
        f"  solve_seconds median {fast['solve_seconds_median']:.4f} over {args.repeats} "
        f"(all: {', '.join(f'{t:.4f}' for t in fast['solve_seconds'])}); "
        f"CPU s median {fast['cpu_seconds_median']:.4f}",
        f"  objective {fast['objective']!r}, job pairs {fast['job_pairs_in_allocation']}, "
        f"violations {fast['violations']}",
        f"  LP path {', '.join(sorted(set(fast['lp_path'])))}"
        f"{' (' + ', '.join(fast['decomposed']) + ')' if fast['decomposed'] else ''}; "
        f"fallbacks: {'; '.join(_fallback(f) for f in fast['fallbacks']) or 'none'}",
        f"  peak RSS {fast['peak_rss_mib']:.0f} MiB "
        f"({fast['peak_rss_mib_before_solve']:.0f} MiB before the first solve)",
    ]
    nan = float("nan")
    lines += _other_run(
        out.get("exact"),
        "exact (no decomposition)",
        lambda r: (
            f"; relative gap {out.get('exact_gap', nan):.2e}; per job (steps/s) at most "
            f"{out.get('exact_job_gap', nan):.2e}, of their sum {out.get('exact_sum_gap', nan):.2e}"
        ),
    )
    lines += _other_run(
        out.get("reference"),
        "reference",
        lambda r: (
            f", peak RSS {r['peak_rss_mib']:.0f} MiB; "
            f"relative gap {out.get('relative_gap', nan):.2e}"
        ),
    )
    return "\n".join(lines)


def _other_run(
    run: dict[str, Any] | None, name: str, more: Callable[[dict[str, Any]], str]
) -> list[str]:
    """The line of the run compared with (none when it did not run): its error, or its
    objective and median solve time followed by ``more(run)``."""
    if run is None:
        return []
    if "error" in run:
        return [f"  {name}: {run['error']}"]
    return [
        f"  {name} objective {run['objective']!r} in {run['solve_seconds_median']:.2f} s{more(run)}"
    ]


def _comparable(fast: dict[str, Any], other: dict[str, Any]) -> bool:
    return "error" not in fast and "error" not in other and other["objective"] is not None


def _relative_gap(fast: dict[str, Any], other: dict[str, Any]) -> float:
    return abs(fast["objective"] - other["objective"]) / (abs(other["objective"]) or 1.0)


def _fallback(f: dict[str, Any]) -> str:
    return f"call {f['call']} {f['lp']} ({f['reason']}): {f['detail']}"


if __name__ == "__main__":
    sys.exit(main())
