"""The observation path's comment reads: a memo of the grammar against a job's last
reading carried over (records.read_as_before, what SlurmBackend.observe does).

N managed jobs in a 26.05 squeue JSON (the captured records, copied with new ids and
comments); each round JobRecordCache.parse (unchanged records reuse their SlurmJob and
its reading) and every job's .reading (as backends/slurm/view.py asks). A share of the
records changes each round (start_time bumped), so that as many SlurmJob are built
anew and would read their comment again. Modes: "lru" (parse_comment memoised,
32,768 entries, as before), "none" (neither), "carry" (the last reading carried over).

    .venv/bin/python benchmarks/bench_comment_reads.py [N]    # from the repo root
"""

from __future__ import annotations

import copy
import functools
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from slurm_gavel.backends.slurm.record_cache import JobRecordCache
from slurm_gavel.backends.slurm.records import read_as_before
from slurm_gavel.domain import comment_grammar

DOC = Path("tests/backends/data/26.05/squeue-t-all.v0.0.45.json")
TYPES = ["A3C", "LM (batch size 5)", "Transformer (batch size 16)", "ResNet-50 (batch size 64)"]


def make_doc(n: int) -> dict:
    doc = json.loads(DOC.read_text())
    template = next(j for j in doc["jobs"] if j.get("comment", "").startswith("gavel:"))
    jobs = []
    for i in range(n):
        j = copy.deepcopy(template)
        j["job_id"] = 100000 + i
        j["comment"] = f"gavel:type={TYPES[i % 4]},scale={1 + i % 4},steps={1000 * (i + 1)}"
        jobs.append(j)
    doc["jobs"] = jobs
    return doc


PARSED: dict[str, int] = {}  # the grammar's own calls, per mode


def run(n: int, share: float, rounds: int, mode: str) -> list[float]:
    """mode: "lru" (main: the grammar memoised, 32,768 entries), "none" (neither),
    "carry" (this branch: a changed record takes its last record's reading)."""
    parse = comment_grammar.parse_comment

    def counted(*a: Any, **k: Any) -> Any:
        PARSED[mode] = PARSED.get(mode, 0) + 1
        return parse(*a, **k)

    comment_grammar.parse_comment = counted
    if mode == "lru":
        comment_grammar.parse_comment = functools.lru_cache(maxsize=1 << 15)(counted)
    carry = mode == "carry"
    try:
        doc = make_doc(n)
        cache = JobRecordCache()
        seen = {}
        jobs = cache.parse(doc)[1]
        for sj in jobs:
            _ = sj.reading
        seen = {j.job_id: j for j in jobs}
        step = max(1, int(1 / share)) if share > 0 else 0
        out = []
        for r in range(rounds):
            if step:
                for k, j in enumerate(doc["jobs"]):
                    if (k + r) % step == 0:
                        j["start_time"] = {"set": True, "infinite": False, "number": 1000 + r}
            t0 = time.process_time()
            jobs = cache.parse(doc)[1]
            if carry:
                for sj in jobs:
                    read_as_before(sj, seen.get(sj.job_id))
            for sj in jobs:
                _ = sj.reading
            seen = {j.job_id: j for j in jobs}
            out.append(time.process_time() - t0)
        return out
    finally:
        comment_grammar.parse_comment = parse


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 5000
    rounds = 30
    for share in (0.0, 0.1, 1.0):
        res: dict[str, list[float]] = {}
        PARSED.clear()
        for _ in range(2):
            for mode in ("lru", "none", "carry"):
                res.setdefault(mode, []).extend(run(n, share, rounds, mode))
        ms = {m: statistics.median(v) * 1e3 for m, v in res.items()}
        print(
            f"n={n} changed={share:.0%}: lru {ms['lru']:.2f} ms, none {ms['none']:.2f} ms, "
            f"carry {ms['carry']:.2f} ms per round (median of {2 * rounds}); comments "
            f"parsed: "
            + ", ".join(f"{m} {PARSED.get(m, 0)}" for m in ms)
            + f" (first reads {2 * n} each)"
        )


if __name__ == "__main__":
    main()
