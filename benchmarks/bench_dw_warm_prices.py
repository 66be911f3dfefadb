"""Does starting the capacity-price decomposition (policies/solvers/dw.py) from the last
round's prices change its answer, and does it save time? A measurement for the per-job rows'
simulator targets, not a shipped path.

    .venv/bin/python benchmarks/bench_dw_warm_prices.py [--sizes 25:36,300:36,...] [--trials N]

For each size N:G (jobs : GPUs, a third per type of 3), each trial draws N + 3 jobs'
max-min coefficients (type rates 1 / 0.6 / 0.3 times lognormal(0, 0.3) per cell,
normalised by each job's best), solves the max-min LP by decomposition (stages 1 and 2,
mm_lp._decomposed) over jobs 0..N-1 ("last round"), then over jobs 3..N+2 ("this
round") cold and again with the first price search of stage 1 started from last
round's final prices. Prints per size: trials whose two x arrays are bit-identical,
the mean ms of the cold and warm solves, and trials where the decomposition stalled
(the shipped caller then solves the plain LP; such trials are not compared).
The warm start wraps dw.min_beta (a module attribute); this script is the only place
that does so.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import numpy as np

import slurm_gavel.policies.solvers.dw as dw
import slurm_gavel.policies.solvers.mm_lp as mm
from slurm_gavel.policies.solvers.deadline import NO_DEADLINE, Deadline

_shipped_min_beta = dw.min_beta
_warm: list[np.ndarray | None] = [None]
_last: list[np.ndarray | None] = [None]


def _min_beta(
    verts: dw.Vertices,
    gpus: np.ndarray,
    cap: np.ndarray,
    dw: np.ndarray | None = None,
    lam0: np.ndarray | None = None,
    deadline: Deadline = NO_DEADLINE,
) -> dw.BetaResult:
    if lam0 is None and _warm[0] is not None:
        lam0 = _warm[0]  # the first search of stage 1: last round's prices
    res = _shipped_min_beta(verts, gpus, cap, dw, lam0, deadline)
    _last[0] = res.lam
    return res


def _solve(coef: np.ndarray, cap: np.ndarray, warm: np.ndarray | None) -> tuple[np.ndarray, Any]:
    _warm[0] = warm
    n, k = coef.shape
    ones = np.ones(n)
    sol = mm._decomposed(coef, np.ones((n, k), dtype=bool), ones, ones, cap, True, NO_DEADLINE)
    return sol.x, _last[0]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="25:36,300:36,1000:2048,2000:2048,5000:2048")
    ap.add_argument("--trials", type=int, default=20, help="per size (5 above 1,000 jobs)")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    dw.min_beta = _min_beta
    rng = np.random.default_rng(args.seed)
    for spec in args.sizes.split(","):
        n, gpus = (int(v) for v in spec.split(":"))
        cap = np.full(3, round(gpus / 3.0), dtype=np.float64)
        same = compared = stalled = 0
        cold_s = warm_s = 0.0
        for _ in range(args.trials if n <= 1000 else min(args.trials, 5)):
            coef = np.array([1.0, 0.6, 0.3]) * rng.lognormal(0.0, 0.3, (n + 3, 3))
            coef /= coef.max(axis=1, keepdims=True)
            try:
                _, prices = _solve(coef[:n], cap, None)
                t0 = time.perf_counter()
                cold, _ = _solve(coef[3:], cap, None)
                t1 = time.perf_counter()
                warm, _ = _solve(coef[3:], cap, prices)
                t2 = time.perf_counter()
            except dw.DwStalled:
                stalled += 1
                continue
            compared += 1
            same += bool(np.array_equal(cold, warm))
            cold_s += t1 - t0
            warm_s += t2 - t1
        per = max(compared, 1) * 1e-3
        print(
            f"{n} jobs, {gpus} GPUs: bit-identical x {same}/{compared}, "
            f"cold {cold_s / per:.1f} ms, warm {warm_s / per:.1f} ms, stalled {stalled}"
        )


if __name__ == "__main__":
    main()
