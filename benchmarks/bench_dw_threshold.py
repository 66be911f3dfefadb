"""Where the decomposition beats HiGHS: both solvers on every class LP one run solves.

    python benchmarks/bench_dw_threshold.py -- simulate --generate 3000 \
        --interarrival 30 --cluster v100:171x4,p100:171x4,k80:170x4 --row-spread 0.3 \
        --seed 0 --policy max_min_fairness --no-progress --json /tmp/x.json

Everything after ``--`` is a `slurm-gavel` command line. Each max-min class LP
without pair columns (at most dw.DW_MAX_TYPES types) that the command solves is
solved twice, by HiGHS (`decompose=False`) and by the decomposition
(`decompose=True`), each timed; the run goes on with the threshold's own choice
(mm_lp.DW_MIN_COLUMNS), so its summary is the shipped one. Printed per size band
of x columns: the number of LPs, the median milliseconds of each, the largest
|x difference|, and the relative differences of the minimum (stage 1) and of the
total normalised throughput (stage 2). mm_lp.DW_MIN_COLUMNS quotes its figures.
"""

from __future__ import annotations

import statistics
import sys
import time
from typing import Any

import numpy as np

BANDS = [(0, 150), (150, 300), (300, 600), (600, 1000), (1000, 1500), (1500, 2000),
         (2000, 3000), (3000, 5000), (5000, 10**9)]  # fmt: skip

Record = tuple[int, float, float, float, float, float, float, float]


def _rel(a: float, b: float) -> float:
    return (a - b) / max(abs(a), 1e-12)


def table(records: list[Record]) -> str:
    lines = [
        "columns      LPs  HiGHS ms  decomp ms  max|dx|   d(min) rel  d(total) rel (HiGHS-decomp)"
    ]
    for lo, hi in BANDS:
        band = [r for r in records if lo <= r[0] < hi]
        if not band:
            continue
        highs = statistics.median(r[1] for r in band) * 1e3
        dw = statistics.median(r[2] for r in band) * 1e3
        dx = max(r[3] for r in band)
        dz = max(abs(_rel(r[4], r[5])) for r in band)
        dv = [_rel(r[6], r[7]) for r in band]
        lines.append(
            f"{lo:>5}-{hi if hi < 10**9 else '':<6}{len(band):>5}  {highs:8.2f}  {dw:9.2f}"
            f"  {dx:8.1e}  {dz:10.1e}  [{min(dv):.1e}, {max(dv):.1e}]"
        )
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    if "--" not in argv:
        print(__doc__, file=sys.stderr)
        return 2
    command = argv[argv.index("--") + 1 :]
    from slurm_gavel.cli import main as cli_main
    from slurm_gavel.policies.solvers import mm_lp, mm_policy
    from slurm_gavel.policies.solvers.dw import DW_MAX_TYPES

    shipped = mm_lp.solve_max_min_classes
    records: list[Record] = []

    def both(coef: np.ndarray, allowed: np.ndarray, *rest: Any, **kw: Any) -> Any:
        pairs = rest[3] if len(rest) > 3 else kw.get("pairs")
        plain = (pairs is None or not len(pairs)) and kw.get("solver") is None
        if not plain or coef.shape[1] > DW_MAX_TYPES or not allowed.any():
            return shipped(coef, allowed, *rest, **kw)
        kw = {k: v for k, v in kw.items() if k != "decompose"}
        t0 = time.perf_counter()
        a = shipped(coef, allowed, *rest, decompose=False, **kw)
        t1 = time.perf_counter()
        b = shipped(coef, allowed, *rest, decompose=True, **kw)
        t2 = time.perf_counter()
        count = rest[1] if len(rest) > 1 else kw["count"]
        records.append((
            int(allowed.sum()), t1 - t0, t2 - t1, float(np.abs(a.x - b.x).max()),
            a.objective, b.objective, float((count * a.value).sum()),
            float((count * b.value).sum()),
        ))  # fmt: skip
        use_dw = int(allowed.sum()) + 1 >= mm_lp.DW_MIN_COLUMNS
        return b if use_dw else a

    mm_lp.solve_max_min_classes = both
    mm_policy.solve_max_min_classes = both
    try:
        rc = cli_main(command)
    finally:
        print(table(records))
    return int(rc or 0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
