"""Summarise the seeded failover runs of tests/integration/test_standby_on_slurm.py.

    SLURM_GAVEL_SLURM=22.05 SLURM_GAVEL_FAILOVER_REPEATS=20 \\
    SLURM_GAVEL_FAILOVER_OUT=/tmp/failover.jsonl \\
        .venv/bin/python -m pytest tests/integration/test_standby_on_slurm.py -k repeated
    .venv/bin/python benchmarks/failover_summary.py /tmp/failover.jsonl

One line per Slurm release and scenario: the runs, and the seconds from the failure to
the new leader's claim (takeover) and to its first round, median and worst. Every run
in the file passed its checks (a failing run raises before it writes its line).
"""

from __future__ import annotations

import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path


def summary(lines: list[str]) -> list[str]:
    runs: defaultdict[tuple[str, str], list[dict[str, float]]] = defaultdict(list)
    for line in lines:
        if line.strip():
            r = json.loads(line)
            runs[(str(r.get("slurm")), str(r["kind"]))].append(r)
    out = [
        "slurm  scenario                 runs  lease  takeover med/worst  first round med/worst"
        "  within lease+round"
    ]
    for (release, kind), rs in sorted(runs.items()):
        took = [r["takeover_s"] for r in rs if r.get("takeover_s") is not None]
        first = [r["first_round_s"] for r in rs if r.get("first_round_s") is not None]

        def pair(xs: list[float]) -> str:
            return f"{statistics.median(xs):6.2f} / {max(xs):6.2f}" if xs else "     -  /      -"

        lease = rs[0].get("lease_s")
        timed = [r["within_target"] for r in rs if "within_target" in r]
        within = f"{sum(timed)}/{len(timed)}" if timed else "-"
        head = f"{release:6} {kind:24} {len(rs):4}  {lease:5}"
        out.append(f"{head}  {pair(took)}  {pair(first)}  {within:>8}")
    return out


if __name__ == "__main__":
    print("\n".join(summary(Path(sys.argv[1]).read_text().splitlines())))
