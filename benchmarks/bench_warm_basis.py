"""What would warm-starting each re-solve from the previous round's basis save, with
per-job rows, and does it change the schedule? A measurement, not a shipped path.

    python benchmarks/bench_warm_basis.py [--warm] -- SIMULATE ARGS...
    python benchmarks/bench_warm_basis.py --warm -- --generate 1000 --interarrival 2400 \\
        --row-spread 0.3 --seed 0 --policy max_min_fairness --json /tmp/warm.json

Runs `slurm-gavel simulate` (with `--no-progress --no-wall-time`) in this process and
wraps mm_lp_single's HiGHS runs: each is timed (CPU) and its simplex iterations
counted. With `--warm`, stage 1 of every re-solve starts from the previous re-solve's
optimal stage-1 basis, mapped class by class (a class is keyed by its first job's id,
recorded from group_jobs): a column or row of a class seen before takes its old
status; a new class's rows start basic and its columns at 0; the number of basic
variables is then repaired (slacks in from the last row, or basic columns out at 0
from the last column). Stage 2 starts from stage 1's basis as shipped. The result is
still an exact optimum of each LP, but of a degenerate LP it may be another vertex:
compare the two runs' `--json` summaries to see whether the schedule changed.

Prints one line on stderr: wall and CPU of the simulate call, HiGHS runs, their CPU
and iterations, and how many warm bases HiGHS refused (then it solved cold).
The wrappers replace module attributes; this script is the only place that does so.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any

import highspy
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from slurm_gavel.policies.solvers import lp, mm_lp, mm_lp_single, mm_policy

BS = highspy.HighsBasisStatus
STAGE1 = "max-min stage 1"


class Warm:
    """The previous stage-1 basis by class key, and the counters."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.keys: list[str] = []  # class keys of the LP being built
        self.allowed: np.ndarray | None = None
        self.cols: dict[tuple[str, int], Any] = {}
        self.rows: dict[tuple[str, Any], Any] = {}
        self.z_status: Any = None
        self.runs = 0
        self.cpu = 0.0
        self.iterations = 0
        self.refused = 0


def _layout(allowed: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, int]:
    """mm_lp_single's layout: x columns (class, type), fairness rows of runnable
    classes, then a time row per class, then a capacity row per type."""
    xc, xt = np.nonzero(allowed)
    runnable = np.zeros(allowed.shape[0], dtype=bool)
    runnable[xc] = True
    fair = np.cumsum(runnable) - 1
    return xc, xt, runnable, fair, int(fair[-1]) + 1


def _save(w: Warm, h: Any) -> None:
    assert w.allowed is not None
    basis = h.getBasis()
    cs, rs = list(basis.col_status), list(basis.row_status)
    xc, xt, runnable, fair, nf = _layout(w.allowed)
    n_cls, n_types = w.allowed.shape
    w.cols = {(w.keys[c], int(t)): cs[i] for i, (c, t) in enumerate(zip(xc, xt, strict=True))}
    w.rows = {}
    for c in range(n_cls):
        if runnable[c]:
            w.rows[("f", w.keys[c])] = rs[fair[c]]
        w.rows[("t", w.keys[c])] = rs[nf + c]
    for t in range(n_types):
        w.rows[("c", t)] = rs[nf + n_cls + t]
    w.z_status = cs[len(xc)]


def _start(w: Warm, h: Any) -> None:
    assert w.allowed is not None
    xc, xt, runnable, fair, nf = _layout(w.allowed)
    n_cls, n_types = w.allowed.shape
    cs = [w.cols.get((w.keys[c], int(t)), BS.kLower) for c, t in zip(xc, xt, strict=True)]
    cs.append(w.z_status)
    rs = [BS.kBasic] * (nf + n_cls + n_types)
    for c in range(n_cls):
        if runnable[c]:
            rs[fair[c]] = w.rows.get(("f", w.keys[c]), BS.kBasic)
        rs[nf + c] = w.rows.get(("t", w.keys[c]), BS.kBasic)
    for t in range(n_types):
        rs[nf + n_cls + t] = w.rows.get(("c", t), BS.kBasic)
    basic = sum(s == BS.kBasic for s in cs) + sum(s == BS.kBasic for s in rs)
    i = len(rs) - 1
    while basic < len(rs) and i >= 0:
        if rs[i] != BS.kBasic:
            rs[i] = BS.kBasic
            basic += 1
        i -= 1
    j = len(cs) - 2  # never z
    while basic > len(rs) and j >= 0:
        if cs[j] == BS.kBasic:
            cs[j] = BS.kLower
            basic -= 1
        j -= 1
    b = highspy.HighsBasis()
    b.col_status = cs
    b.row_status = rs
    b.valid = True
    if h.setBasis(b) != highspy.HighsStatus.kOk:
        w.refused += 1


def keyed_group_jobs(into: Any) -> Any:
    """mm_policy.group_jobs that also stores each class's key (its first job's id) on
    ``into.keys``, so a basis can be mapped class by class between re-solves."""
    group_jobs = mm_policy.group_jobs

    def keyed(problem: Any, **kw: Any) -> Any:
        classes = group_jobs(problem, **kw)
        into.keys = [problem.jobs[int(m[0])].id for m in classes.members]
        return classes

    return keyed


def install(w: Warm) -> None:
    solve = mm_lp_single.solve_single_classes

    def solve_single(coef: Any, allowed: Any, *args: Any, **kw: Any) -> Any:
        w.allowed = allowed
        return solve(coef, allowed, *args, **kw)

    def run(h: Any, what: str) -> None:
        t = time.process_time()
        if w.enabled and what == STAGE1 and w.z_status is not None:
            _start(w, h)
        lp.run_small_lp(h, what)
        w.runs += 1
        w.cpu += time.process_time() - t
        w.iterations += h.getInfo().simplex_iteration_count
        if w.enabled and what == STAGE1:
            _save(w, h)

    mm_policy.group_jobs = keyed_group_jobs(w)
    mm_lp.solve_single_classes = solve_single
    mm_lp_single.run_small_lp = run


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--warm", action="store_true", help="warm-start stage 1 (else cold)")
    p.add_argument("simulate", nargs=argparse.REMAINDER, help="-- then simulate's arguments")
    args = p.parse_args()
    rest = args.simulate[1:] if args.simulate[:1] == ["--"] else args.simulate
    w = Warm(args.warm)
    install(w)
    from slurm_gavel.cli import main as cli

    t, c = time.perf_counter(), time.process_time()
    code = cli(["simulate", "--no-progress", "--no-wall-time", *rest])
    print(
        f"{'warm' if w.enabled else 'cold'}: wall {time.perf_counter() - t:.2f} s, "
        f"CPU {time.process_time() - c:.2f} s; HiGHS runs {w.runs}, CPU {w.cpu:.2f} s, "
        f"iterations {w.iterations}, warm bases refused {w.refused}",
        file=sys.stderr,
    )
    return code


if __name__ == "__main__":
    raise SystemExit(main())
