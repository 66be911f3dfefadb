"""Time the learned rows' part of the daemon's state file, with and without the progress
behind each cell (core/learned_rows/job_rows_doc.py), at a given number of jobs.

    python benchmarks/bench_state_rows.py --jobs 5000 --repeats 5

Each job has two measured cells and a prior on three GPU types; with progress, also a
progress cell on each measured type and its last sighting (what trust bounds keep per
running job). Times rows_to_json plus the compact json.dumps the state store does (a
round encodes the rows three times: the pre-round copy, the inflight record and the
after-round save) and json.loads plus rows_from_json (a daemon start). Quoted: the
fastest of --repeats.
"""

from __future__ import annotations

import argparse
import json
import time

from slurm_gavel.core.learned_rows.job_rows import JobRows, LastSeen, Measured
from slurm_gavel.core.learned_rows.job_rows_doc import rows_from_json, rows_to_json
from slurm_gavel.core.learned_rows.row_trust import Progress


def rows(jobs: int, progress: bool) -> JobRows:
    r = JobRows()
    for i in range(jobs):
        j = str(i)
        r.measured[j] = {"v100": Measured(1.5, 720.0, 1.2, 360.0, 1), "k80": Measured(0.5, 360.0)}
        r.scale_factor[j] = 1
        r.anchor[j] = {"v100": 1.0, "p100": 0.7, "k80": 0.3}
        if progress:
            r.progress[j] = {
                "v100": Progress(1000.0, 720.0, 2, 30.0),
                "k80": Progress(100.0, 360.0, 1, 0.0),
            }
            r.last_seen[j] = LastSeen("v100", 1, 1000.0, {"v100": 720.0, "k80": 360.0})
    return r


def best(f, repeats: int) -> float:
    out = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        f()
        out = min(out, time.perf_counter() - t)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--jobs", type=int, default=5000)
    p.add_argument("--repeats", type=int, default=5)
    a = p.parse_args()
    for progress in (False, True):
        r = rows(a.jobs, progress)
        text = json.dumps(rows_to_json(r), separators=(",", ":"))
        save = best(lambda r=r: json.dumps(rows_to_json(r), separators=(",", ":")), a.repeats)
        load = best(lambda text=text: rows_from_json(json.loads(text)), a.repeats)
        print(
            f"progress {'kept' if progress else 'not kept'}: {len(text) / 1e6:.2f} MB, "
            f"encode {save * 1000:.1f} ms, load {load * 1000:.1f} ms"
        )


if __name__ == "__main__":
    main()
