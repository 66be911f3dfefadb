"""Would warm-started LPs make the 1,000-job trace meet 3 s? Measure, do not guess.

    python benchmarks/bench_lp_warm_start.py --repeats 3

Captures every class max-min LP the simulator solves on the single1000 case
(1,000 single-GPU jobs, one per 40 min, 36 GPUs, max_min_fairness), then solves
the whole sequence twice, timed apart from the simulation:

- cold: as the project does (mm_lp_single.solve_single_classes): each LP built and
  solved from scratch, two stages, so the allocation depends on the job set only;
- warm: one HiGHS model holding a class for every job class the trace ever has,
  kept across solves. A class with no job has its fairness row switched off and
  its GPU coefficients set to 0; each solve changes only the coefficients, bounds
  and costs that differ, and HiGHS starts from the previous optimal basis.

Prints the median seconds of each, their ratio, and how many warm solutions are a
different optimal vertex (same stage-1 minimum, other fractions): those would
change the simulation's results, and make a restarted daemon (cold) disagree with
one that never stopped (warm).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import highspy
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench_simulate import CASES  # this folder: the cases are defined once

from slurm_gavel.policies.solvers import mm_lp
from slurm_gavel.policies.solvers.mm_lp_single import solve_single_classes

INF = highspy.kHighsInf
SLACK = 1e-9
LpCall = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]


def capture() -> list[LpCall]:
    """The class LPs (coef, allowed, scale, count, capacity) of the single1000 run."""
    from slurm_gavel.backends.cluster_spec import parse_cluster_spec
    from slurm_gavel.domain.throughputs import load_table
    from slurm_gavel.simulate.engine import SimulationOptions, simulate
    from slurm_gavel.simulate.generate import generate_trace

    calls: list[LpCall] = []
    real = mm_lp.solve_single_classes

    def spy(coef, allowed, scale, count, capacity, **kw):
        calls.append((coef.copy(), allowed.copy(), scale.copy(), count.copy(), capacity.copy()))
        return real(coef, allowed, scale, count, capacity, **kw)

    mm_lp.solve_single_classes = spy
    try:
        case = CASES["single1000"]
        table = load_table(None)
        nodes = parse_cluster_spec(case["cluster"], table)
        jobs = generate_trace(
            case["jobs"], case["interarrival"], table, seed=0, multi_gpu=case["multi_gpu"]
        )
        simulate(jobs, nodes, table, "max_min_fairness", SimulationOptions(progress=False))
    finally:
        mm_lp.solve_single_classes = real
    return calls


def cold(calls: list[LpCall]) -> list[np.ndarray]:
    return [
        solve_single_classes(*c, second_stage=True, time_limit=None, slack=SLACK)[0] for c in calls
    ]


class WarmModel:
    """One HiGHS model over the union of the trace's classes, re-solved in place."""

    def __init__(self, calls: list[LpCall]) -> None:
        universe: dict[bytes, int] = {}
        rows: list[tuple[np.ndarray, np.ndarray, float]] = []
        for coef, allowed, scale, _, _ in calls:
            for r, a, s in zip(coef, allowed, scale, strict=True):
                key = r.tobytes() + a.tobytes() + np.float64(s).tobytes()
                if key not in universe:
                    universe[key] = len(rows)
                    rows.append((r, a, float(s)))
        self.universe = universe
        u, k = len(rows), calls[0][0].shape[1]
        self.coef = np.array([r for r, _, _ in rows])
        self.allowed = np.array([a for _, a, _ in rows])
        self.scale = np.array([s for _, _, s in rows])
        self.xc, self.xt = np.nonzero(self.allowed)
        nx = len(self.xc)
        self.u, self.k, self.nx = u, k, nx
        self.col = {
            (int(c), int(t)): i for i, (c, t) in enumerate(zip(self.xc, self.xt, strict=True))
        }
        index: list[int] = []
        value: list[float] = []
        start = [0]
        for c, t in zip(self.xc.tolist(), self.xt.tolist(), strict=True):
            index += [c, u + c, 2 * u + t]
            value += [-self.coef[c, t], 1.0, 0.0]
            start.append(len(index))
        index += list(range(u))
        value += [1.0] * u
        start.append(len(index))
        lp = highspy.HighsLp()
        lp.num_col_, lp.num_row_ = nx + 1, 2 * u + k
        cost = np.zeros(nx + 1)
        cost[nx] = 1.0
        lp.col_cost_ = cost
        lp.col_lower_ = np.zeros(nx + 1)
        lp.col_upper_ = np.full(nx + 1, INF)
        lp.row_lower_ = np.full(2 * u + k, -INF)
        upper = np.empty(2 * u + k)
        upper[:u], upper[u : 2 * u], upper[2 * u :] = INF, 1.0, 0.0
        lp.row_upper_ = upper
        lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
        lp.a_matrix_.start_ = np.array(start, dtype=np.int32)
        lp.a_matrix_.index_ = np.array(index, dtype=np.int32)
        lp.a_matrix_.value_ = np.array(value)
        lp.sense_ = highspy.ObjSense.kMaximize
        self.h = highspy._Highs()  # type: ignore[attr-defined]  # not in highspy's stubs
        self.h.setOptionValue("output_flag", False)
        self.h.passModel(lp)
        self.h.setOptionValue("solver", "simplex")
        self.count = np.zeros(u)
        self.capacity = np.zeros(k)
        self.all_cols = np.arange(nx + 1, dtype=np.int32)

    def solve(self, call: LpCall) -> np.ndarray:
        coef, allowed, scale, count, capacity = call
        h, u, nx = self.h, self.u, self.nx
        idx = [
            self.universe[r.tobytes() + a.tobytes() + np.float64(s).tobytes()]
            for r, a, s in zip(coef, allowed, scale, strict=True)
        ]
        new = np.zeros(u)
        new[idx] = count
        for c in np.nonzero(new != self.count)[0]:
            for t in np.nonzero(self.allowed[c])[0]:
                h.changeCoeff(2 * u + int(t), self.col[(int(c), int(t))], new[c] * self.scale[c])
            h.changeRowBounds(int(c), -INF, 0.0 if new[c] > 0 else INF)
        self.count = new
        for t in np.nonzero(capacity != self.capacity)[0]:
            h.changeRowBounds(2 * u + int(t), -INF, float(capacity[t]))
        self.capacity = capacity.copy()
        stage1 = np.zeros(nx + 1)
        stage1[nx] = 1.0
        h.changeColBounds(nx, 0.0, INF)
        h.changeColsCost(nx + 1, self.all_cols, stage1)
        h.run()
        z = h.getSolution().col_value[nx]
        stage2 = np.zeros(nx + 1)
        stage2[:nx] = new[self.xc] * self.coef[self.xc, self.xt]
        h.changeColBounds(nx, max(z * (1 - SLACK), 0.0), INF)
        h.changeColsCost(nx + 1, self.all_cols, stage2)
        h.run()
        sol = np.asarray(h.getSolution().col_value)
        x = np.zeros((u, self.k))
        x[self.xc, self.xt] = np.clip(sol[:nx], 0.0, 1.0)
        return x[idx]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args(argv)
    calls = capture()
    cold_s, warm_s = [], []
    for _ in range(args.repeats):
        t = time.perf_counter()
        xs_cold = cold(calls)
        cold_s.append(time.perf_counter() - t)
        model = WarmModel(calls)  # a fresh model per repeat: the first solve is cold too
        t = time.perf_counter()
        xs_warm = [model.solve(c) for c in calls]
        warm_s.append(time.perf_counter() - t)
    other_vertex = sum(
        not np.allclose(a, b, atol=1e-7) for a, b in zip(xs_cold, xs_warm, strict=True)
    )
    worse_min = 0
    for c, a, b in zip(calls, xs_cold, xs_warm, strict=True):
        runnable = c[1].any(axis=1)
        za = (c[0] * a).sum(axis=1)[runnable].min()
        zb = (c[0] * b).sum(axis=1)[runnable].min()
        worse_min += int(zb < za - 1e-6 * max(1.0, abs(za)))
    cm, wm = statistics.median(cold_s), statistics.median(warm_s)
    print(f"{len(calls)} class LPs (two stages each) of the single1000 trace")
    print(f"cold (as shipped): median {cm:.2f} s  runs {', '.join(f'{s:.2f}' for s in cold_s)}")
    print(f"warm (one model):  median {wm:.2f} s  runs {', '.join(f'{s:.2f}' for s in warm_s)}")
    print(f"warm / cold: {wm / cm:.2f}; saves {cm - wm:.2f} s of the trace's total")
    print(f"warm solutions at another optimal vertex: {other_vertex} of {len(calls)}")
    print(f"warm solutions with a lower minimum (should be 0): {worse_min}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
