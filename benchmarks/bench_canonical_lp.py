"""A canonical optimum for the simulator's re-solves, so that a warm start cannot change
the allocation (the 2.0 s target of the 1,000-job own-row simulation). A measurement,
not a shipped path.

    python benchmarks/bench_canonical_lp.py --mode today|cold|warm [--check] \\
        [--dump FILE.npz] -- SIMULATE ARGS...
    python benchmarks/bench_canonical_lp.py --mode warm -- --generate 1000 \\
        --interarrival 2400 --row-spread 0.3 --seed 0 --policy max_min_fairness \\
        --knowledge learned --json /tmp/warm.json

Runs `slurm-gavel simulate` (with `--no-progress --no-wall-time`) in this process and
wraps mm_lp_single's HiGHS runs, as benchmarks/bench_warm_basis.py does (its
class-by-class basis mapping is reused):

- `today`: the shipped two stages, each re-solve cold; only timed.
- `cold`: canonical. Stage 2 holds the minimum at stage 1's z* with no slack (`--slack`;
  the shipped 1e-9 leaves a sliver ~1e-8 wide in x, below HiGHS's 1e-7 feasibility
  tolerance, in which different bases end at different points), then a lexicographic
  stage 3 on the same HiGHS instance: stage 2's optimal face is fixed from its duals
  (complementary slackness: a column with a nonzero reduced cost stays at its bound, a
  row with a nonzero dual stays at its bound; that holds for *any* optimal dual, so
  the face does not depend on which basis stage 2 ended in), and the objective becomes
  sum w[c, t] x[c, t], w = 1 + u, u in [0, 1) from blake2b(class key, type index)
  (class key: its first job's id, a function of the problem). Generic weights make
  stage 3's optimum one point, so every path that ends optimal ends there. Stage 3 runs
  primal simplex from stage 2's basis (still feasible). Then dust is rounded (`--snap`:
  x < 1e-9 to 0, x > 1 - 1e-9 to 1): the mechanism reads any x > 0 as an allocation;
  and x is recomputed from its support and the rows active there by least squares
  (`--polish`), so that one vertex gives one floating-point answer whatever basis
  HiGHS ended in (tied fractions of the type table otherwise differ by 1e-11).
  `--no-stage3`: (1) and the rounding only.
- `warm`: as `cold`, but stage 1 starts from the previous re-solve's stage-1 basis.

`--face row` holds stage 2's optimum by a new row (sum n_c coef x >= v2, scaled to
`--row-target`) and z >= its stage-2 value instead of the duals' bounds (measured, not
kept: see benchmarks/README.md). `--skip-unique`: no stage 3 when stage 2 is dual
nondegenerate (every nonbasic column and row has a nonzero dual: its optimum is unique).

`--check`: after each re-solve, solve the same LP twice more (canonical cold; today's
cold) and record the largest |x - x_canonical_cold| and (canonical - today) / today of
the minimum and of the stage-2 objective, and the worst (minimum - z1) / z1 against the
re-solve's own stage-1 optimum. Triples the solver work: time runs without it.
`--dump`: every re-solve's x and class keys (.npz), to compare two runs re-solve by
re-solve. Prints one line on stderr. Only this script and bench_warm_basis.py replace
module attributes.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
import time
from typing import Any

import highspy
import numpy as np

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(here))
sys.path.insert(0, here)

from bench_warm_basis import BS, STAGE1, Warm, _layout, _save, _start, keyed_group_jobs  # noqa: E402

from slurm_gavel.policies.solvers import lp, mm_lp, mm_lp_single, mm_policy  # noqa: E402

STAGE2 = "max-min stage 2"
INF = highspy.kHighsInf
_weights: dict[tuple[str, int], np.ndarray] = {}


def weights(key: str, n_types: int) -> np.ndarray:
    """1 + u per type, u in [0, 1) from a hash of (class key, type index): the same in
    every run and process (not Python's salted hash)."""
    w = _weights.get((key, n_types))
    if w is None:
        w = np.array([
            1.0 + int.from_bytes(
                hashlib.blake2b(f"{key}\0{t}".encode(), digest_size=8).digest(), "little"
            ) / 2.0**64
            for t in range(n_types)
        ])  # fmt: skip
        _weights[(key, n_types)] = w
    return w


class State(Warm):
    def __init__(self, args: argparse.Namespace) -> None:
        super().__init__(args.mode == "warm")
        self.canonical = args.mode != "today"
        self.a = args
        self.w2 = Warm(True)  # --warm2: the previous stage-2 basis
        self.inner = False  # inside a --check re-solve: no warm start, no saving
        self.inner_canonical = True
        self.coef: np.ndarray | None = None
        self.count: np.ndarray | None = None
        self.cpu_stage = {
            "1": 0.0, "2": 0.0, "3 set-up": 0.0, "3": 0.0, "map": 0.0, "polish": 0.0
        }  # fmt: skip
        self.b1, self.b2 = Basis(), Basis()
        self.unpolished = 0
        self.failed: dict[str, int] = {}  # HiGHS failures by stage (1, 2)
        self.stage3_runs = self.stage3_skipped = self.stage3_failed = 0
        self.stage3_zero_iter = 0
        self.v2_lost = 0.0
        self.max_dx = 0.0
        self.dz = (0.0, 0.0)  # smallest, largest (canonical - today) / today
        self.dv2 = (0.0, 0.0)
        self.z1 = 0.0  # the last stage 1's optimum
        self.below_z1 = [0.0, 0.0, 0.0]  # worst (min - z1) / z1: run, canonical cold, today
        self.checked = 0
        self.dump: list[tuple[list[str], np.ndarray]] | None = [] if args.dump else None


ENUM = [BS.kLower, BS.kBasic, BS.kUpper, BS.kZero, BS.kNonbasic]  # by int value


class Basis:
    """A stage's optimal basis by class key, in arrays: bench_warm_basis's mapping
    (same statuses, same repair of the basic count), without a Python loop per cell."""

    def __init__(self) -> None:
        self.cls: dict[str, tuple[np.ndarray, int, int]] = {}  # key: (col per type, fair, time)
        self.cap: np.ndarray | None = None
        self.z = -1
        self.refused = 0

    def save(self, h: Any, keys: list[str], allowed: np.ndarray | None) -> None:
        assert allowed is not None  # set by the solve this basis comes from
        basis = h.getBasis()
        cs = np.fromiter(map(int, basis.col_status), np.int64)
        rs = np.fromiter(map(int, basis.row_status), np.int64)
        xc, xt, runnable, fair, nf = _layout(allowed)
        n_cls, n_types = allowed.shape
        grid = np.full((n_cls, n_types), -1)
        grid[xc, xt] = cs[: len(xc)]
        fs = np.full(n_cls, -1)
        fs[runnable] = rs[fair[runnable]]
        ts = rs[nf : nf + n_cls]
        self.cls = {k: (grid[c], int(fs[c]), int(ts[c])) for c, k in enumerate(keys)}
        self.cap = rs[nf + n_cls :].copy()
        self.z = int(cs[len(xc)])

    def start(self, h: Any, keys: list[str], allowed: np.ndarray | None) -> None:
        assert allowed is not None  # set by the solve being warm-started
        xc, xt, runnable, _, _ = _layout(allowed)
        n_cls, n_types = allowed.shape
        grid = np.zeros((n_cls, n_types), dtype=np.int64)  # new cells at their lower bound
        fs = np.ones(n_cls, dtype=np.int64)  # new rows basic
        ts = np.ones(n_cls, dtype=np.int64)
        for c, k in enumerate(keys):
            old = self.cls.get(k)
            if old is not None:
                grid[c], fs[c], ts[c] = old
        grid[grid < 0] = 0  # a type the class could not use before
        fs[fs < 0] = 1
        cs = np.append(grid[xc, xt], self.z)
        assert self.cap is not None
        rs = np.concatenate([fs[runnable], ts, self.cap])
        basic = int((cs == 1).sum() + (rs == 1).sum())
        if basic < len(rs):
            idx = np.nonzero(rs != 1)[0][::-1][: len(rs) - basic]
            rs[idx] = 1
        elif basic > len(rs):
            idx = np.nonzero(cs[:-1] == 1)[0][::-1][: basic - len(rs)]
            cs[idx] = 0
        b = highspy.HighsBasis()
        b.col_status = [ENUM[v] for v in cs.tolist()]
        b.row_status = [ENUM[v] for v in rs.tolist()]
        b.valid = True
        if h.setBasis(b) != highspy.HighsStatus.kOk:
            self.refused += 1


def _fix_face(h: Any, eps: float, skip_unique: bool) -> bool:
    """Fix stage 2's optimal face from its duals (see the module docstring); False, with
    nothing fixed, when `skip_unique` and the face is one point. A basic variable has a zero
    dual, so a nonzero dual names a nonbasic one at its bound; there are n_cols
    nonbasic variables, so when every one has a nonzero dual the optimum is unique."""
    sol = h.getSolution()
    col_dual, row_dual = np.asarray(sol.col_dual), np.asarray(sol.row_dual)
    col_fix = np.nonzero(np.abs(col_dual) > eps)[0].astype(np.int32)
    row_fix = np.nonzero(np.abs(row_dual) > eps)[0].astype(np.int32)
    if skip_unique and len(col_fix) + len(row_fix) == len(col_dual):
        return False
    # Every column here is [lower, inf) and every row (-inf, upper]: a nonzero dual
    # means the variable sits at that one finite bound.
    lp_ = h.getLp()
    if len(col_fix):
        v = np.asarray(lp_.col_lower_)[col_fix]
        h.changeColsBounds(len(col_fix), col_fix, v, v)
    if len(row_fix):
        v = np.asarray(lp_.row_upper_)[row_fix]
        h.changeRowsBounds(len(row_fix), row_fix, v, v)
    return True


def _stage3(s: State, h: Any) -> None:
    assert s.allowed is not None and s.coef is not None and s.count is not None
    t = time.process_time()
    xc, xt = np.nonzero(s.allowed)
    nx = len(xc)
    stage2 = s.count[xc] * s.coef[xc, xt]
    sol = np.asarray(h.getSolution().col_value)
    v2 = float(stage2 @ sol[:nx])
    if s.a.face == "row":
        h.changeColBounds(nx, float(sol[nx]), INF)  # hold stage 2's minimum as well
        f = s.a.row_target / v2 if s.a.row_target and v2 > 0 else 1.0
        h.addRow(v2 * f, INF, nx, np.arange(nx, dtype=np.int32), stage2 * f)
    elif not _fix_face(h, s.a.dual_eps, s.a.skip_unique):
        s.stage3_skipped += 1
        s.cpu_stage["3 set-up"] += time.process_time() - t
        return
    w = np.zeros(nx + 1)
    w[:nx] = np.array([weights(s.keys[c], len(s.allowed[0])) for c in range(len(s.keys))])[xc, xt]
    h.changeColsCost(nx + 1, np.arange(nx + 1, dtype=np.int32), w)
    h.setOptionValue("simplex_strategy", 4)  # primal: stage 2's basis is still feasible
    t3 = time.process_time()
    s.cpu_stage["3 set-up"] += t3 - t
    try:
        lp.run_to_optimum(h, "max-min stage 3")
    finally:  # the reused instance's default again
        h.setOptionValue("simplex_strategy", 1)
        s.cpu_stage["3"] += time.process_time() - t3
    s.stage3_runs += 1
    s.stage3_zero_iter += h.getInfo().simplex_iteration_count == 0
    s.iterations += h.getInfo().simplex_iteration_count
    after = float(stage2 @ np.asarray(h.getSolution().col_value)[:nx])
    s.v2_lost = max(s.v2_lost, (v2 - after) / max(abs(v2), 1e-300))


def _snap(x: np.ndarray, eps: float) -> None:
    """Round floating-point dust: different basis paths to one vertex leave different
    dust (1e-13), and the mechanism reads any x > 0 as an allocation (a job that never
    ran on such a type ranks first there)."""
    x[x < eps] = 0.0
    x[x > 1.0 - eps] = 1.0


def _polish(
    x: np.ndarray,
    coef: np.ndarray,
    allowed: np.ndarray,
    scale: np.ndarray,
    count: np.ndarray,
    capacity: np.ndarray,
    runnable: np.ndarray,
    tol: float,
    normal: bool = False,
) -> np.ndarray | None:
    """The vertex x lies on, recomputed from the LP's data alone: its support
    (x > tol) and the rows active there (slack < tol, relative), solved by least
    squares. Stage 2's optimum is a vertex of the max-min polytope (the optimal face of
    stage 1 is a face of it), so it is fixed by those rows without z* or any other
    number a solver path computed; the same support and rows give the same floating
    point answer bit for bit. None (keep x) when the rows do not fix the point."""
    sc, st = np.nonzero((x > tol) & allowed)
    zc = (coef * x).sum(1)[runnable].min()
    val = (coef * x).sum(1)
    fair = np.nonzero(runnable & (val - zc <= tol * max(zc, 1.0)))[0]  # coef_c . x_c = z
    full = np.nonzero(x.sum(1) >= 1.0 - tol)[0]  # time rows at 1
    size = count * scale
    cap = np.nonzero((size[:, None] * x).sum(0) >= capacity * (1.0 - tol))[0]  # full types
    n = len(sc) + 1  # the support's columns and z
    if len(fair) + len(full) + len(cap) < n:
        return None
    a = np.zeros((len(fair) + len(full) + len(cap), n))
    a[: len(fair), :-1] = (sc[None, :] == fair[:, None]) * coef[sc, st][None, :]
    a[: len(fair), -1] = -1.0
    a[len(fair) : len(fair) + len(full), :-1] = sc[None, :] == full[:, None]
    a[len(fair) + len(full) :, :-1] = (st[None, :] == cap[:, None]) * size[sc][None, :]
    b = np.concatenate([np.zeros(len(fair)), np.ones(len(full)), capacity[cap]])
    if normal:  # (A'A) y = A'b: ~13 us instead of ~130 us at 45 x 40; same determinism
        try:
            sol = np.linalg.solve(a.T @ a, a.T @ b)
        except np.linalg.LinAlgError:
            return None
    else:
        sol, _, rank, _ = np.linalg.lstsq(a, b, rcond=None)
        if rank < n:
            return None
    out = np.zeros_like(x)
    out[sc, st] = sol[:-1]
    if np.abs(out - x).max() > 1e-6:  # not the same point: keep the solver's
        return None
    return np.clip(out, 0.0, 1.0)


def install(s: State) -> None:
    solve = mm_lp_single.solve_single_classes

    def one(canonical: bool, args: tuple[Any, ...], kw: dict[str, Any]) -> Any:
        if canonical:
            kw = {**kw, "slack": s.a.slack}
        x, runnable = solve(*args, **kw)
        if canonical and s.a.snap:
            _snap(x, s.a.snap)
        if canonical and s.a.polish and runnable.any():
            t = time.process_time()
            coef, allowed, scale, count, capacity = args  # solve()'s positional inputs
            p = _polish(x, coef, allowed, scale, count, capacity, runnable, s.a.polish, s.a.normal)
            s.cpu_stage["polish"] += time.process_time() - t
            if p is None:
                s.unpolished += 1
            else:
                x = p
        return x, runnable

    def solve_single(
        coef: Any, allowed: Any, scale: Any, count: Any, capacity: Any, **kw: Any
    ) -> Any:
        s.allowed, s.coef, s.count = allowed, coef, count
        args = (coef, allowed, scale, count, capacity)
        x, runnable = one(s.canonical, args, kw)
        if s.dump is not None:
            s.dump.append((list(s.keys), x.copy()))
        if not s.a.check:
            return x, runnable

        def below(i: int, x: np.ndarray) -> None:
            if runnable.any():
                b = ((coef * x).sum(1)[runnable].min() - s.z1) / max(abs(s.z1), 1e-300)
                s.below_z1[i] = min(s.below_z1[i], float(b))

        below(0, x)
        s.inner = True
        try:
            s.inner_canonical = True
            xc, _ = one(True, args, kw)
            below(1, xc)
            s.inner_canonical = False
            xt, _ = one(False, args, kw)
            below(2, xt)
        finally:
            s.inner, s.inner_canonical = False, True
        s.max_dx = max(s.max_dx, float(np.abs(x - xc).max(initial=0.0)))
        r = runnable
        z, zt = (coef * x).sum(1)[r].min(), (coef * xt).sum(1)[r].min()
        v2 = float((count[:, None] * coef * x).sum())
        v2t = float((count[:, None] * coef * xt).sum())
        rz, rv = (z - zt) / max(abs(zt), 1e-300), (v2 - v2t) / max(abs(v2t), 1e-300)
        s.dz = (min(s.dz[0], rz), max(s.dz[1], rz))
        s.dv2 = (min(s.dv2[0], rv), max(s.dv2[1], rv))
        s.checked += 1
        return x, runnable

    def run(h: Any, what: str) -> None:
        warm = s.enabled and not s.inner
        fast = not s.a.slow_map
        t0 = time.process_time()
        if warm and what == STAGE1 and s.a.one_basis:
            if s.b2.cap is not None:  # stage 1 from the previous stage 2's basis
                s.b2.start(h, s.keys, s.allowed)
        elif warm and what == STAGE1:
            if fast and s.b1.cap is not None:
                s.b1.start(h, s.keys, s.allowed)
            elif not fast and s.z_status is not None:
                _start(s, h)
        if warm and what == STAGE2 and s.a.warm2:
            if fast and s.b2.cap is not None:
                s.b2.start(h, s.keys, s.allowed)
            elif not fast and s.w2.z_status is not None:
                s.w2.keys, s.w2.allowed = s.keys, s.allowed
                _start(s.w2, h)
        t1 = time.process_time()
        try:
            lp.run_small_lp(h, what)
        except lp.SolverError:
            s.failed[what] = s.failed.get(what, 0) + 1  # counted: stage 2's falls back
            raise
        t2 = time.process_time()
        if warm and s.a.one_basis:
            if what == STAGE2:
                s.b2.save(h, s.keys, s.allowed)
        elif warm and (what == STAGE1 or s.a.warm2):  # the basis before stage 3 changes it
            if fast:
                (s.b1 if what == STAGE1 else s.b2).save(h, s.keys, s.allowed)
            elif what == STAGE1:
                _save(s, h)
            else:
                s.w2.keys, s.w2.allowed = s.keys, s.allowed
                _save(s.w2, h)
        s.cpu_stage["map"] += (t1 - t0) + (time.process_time() - t2)
        s.cpu_stage["1" if what == STAGE1 else "2"] += t2 - t1
        if what == STAGE1:
            s.z1 = float(h.getInfo().objective_function_value)
        s.runs += 1
        s.iterations += h.getInfo().simplex_iteration_count
        canonical = s.inner_canonical if s.inner else s.canonical
        if what == STAGE2 and canonical and not s.a.no_stage3:
            try:
                _stage3(s, h)
            except lp.SolverError:
                s.stage3_failed += 1
                raise  # the solver then keeps stage 1's point: counted, never silent

    mm_policy.group_jobs = keyed_group_jobs(s)
    mm_lp.solve_single_classes = solve_single
    mm_lp_single.run_small_lp = run


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--mode", choices=("today", "cold", "warm"), required=True)
    p.add_argument("--check", action="store_true", help="compare every re-solve (slow)")
    p.add_argument("--slack", type=float, default=0.0,
                   help="canonical: stage 2's relative slack on z (shipped: 1e-9)")  # fmt: skip
    p.add_argument("--snap", type=float, default=1e-9,
                   help="canonical: x below this to 0, within it of 1 to 1 (0: off)")  # fmt: skip
    p.add_argument("--face", choices=("duals", "row"), default="duals",
                   help="how stage 3 holds stage 2's optimum")  # fmt: skip
    p.add_argument("--dual-eps", type=float, default=1e-9, help="a dual this small counts as 0")
    p.add_argument("--row-target", type=float, default=1e4,
                   help="--face row: scale the row to this activity (0: unscaled)")  # fmt: skip
    p.add_argument("--polish", type=float, default=1e-9,
                   help="canonical: x from its support and active rows (tol; 0: off)")  # fmt: skip
    for flag, what in (
        ("--skip-unique", "no stage 3 where stage 2's optimum is unique"),
        ("--warm2", "warm: stage 2 too from the previous stage-2 basis"),
        ("--no-stage3", "canonical: only the slack and the snap, no stage 3"),
        ("--slow-map", "warm: bench_warm_basis's per-cell Python mapping"),
        ("--normal", "polish by the normal equations, not lstsq"),
        ("--one-basis", "warm: stage 1 from the last stage-2 basis (one save)"),
    ):
        p.add_argument(flag, action="store_true", help=what)
    p.add_argument("--dump", help="save every re-solve's x to this .npz")
    p.add_argument("simulate", nargs=argparse.REMAINDER, help="-- then simulate's arguments")
    args = p.parse_args()
    rest = args.simulate[1:] if args.simulate[:1] == ["--"] else args.simulate
    s = State(args)
    install(s)
    from slurm_gavel.cli import main as cli

    t, c = time.perf_counter(), time.process_time()
    code = cli(["simulate", "--no-progress", "--no-wall-time", *rest])
    stages = ", ".join(f"{k} {v:.2f}" for k, v in s.cpu_stage.items())
    line = (
        f"{args.mode}: wall {time.perf_counter() - t:.2f} s, CPU {time.process_time() - c:.2f} s; "
        f"HiGHS runs {s.runs + s.stage3_runs}, CPU s by stage: {stages}; iterations "
        f"{s.iterations}; stage 3 runs {s.stage3_runs} ({s.stage3_zero_iter} with 0 "
        f"iterations), skipped {s.stage3_skipped}, failed {s.stage3_failed}; warm bases "
        f"refused {s.refused + s.w2.refused + s.b1.refused + s.b2.refused}; stage-2 objective "
        f"lost in stage 3 (rel) "
        f"{s.v2_lost:.1e}; not polished {s.unpolished}; stage 1/2 failures {s.failed or 0}"
    )
    if args.check:
        line += (
            f"; checked {s.checked}: max |x - x_canonical_cold| {s.max_dx:.1e}; "
            f"(canonical - today) / today: minimum {s.dz[0]:.1e} to {s.dz[1]:.1e}, "
            f"stage-2 objective {s.dv2[0]:.1e} to {s.dv2[1]:.1e}; worst (minimum - z1) / z1: "
            f"this run {s.below_z1[0]:.1e}, canonical cold {s.below_z1[1]:.1e}, "
            f"today {s.below_z1[2]:.1e}"
        )
    print(line, file=sys.stderr)
    if s.dump is not None:
        arrays: dict[str, Any] = {f"x{i}": x for i, (_, x) in enumerate(s.dump)}
        arrays["keys"] = np.array(["\0".join(k) for k, _ in s.dump])
        np.savez_compressed(args.dump, **arrays)
    return code


if __name__ == "__main__":
    raise SystemExit(main())
