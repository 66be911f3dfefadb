"""Time the daemon's read of the progress spool (ProgressTracker.merge) per round.

    .venv/bin/python benchmarks/bench_progress_spool.py --jobs 10000 --users 200 --hostile 0.1

Run as root (it hands files to the uids it plays). Builds a spool of --jobs running
managed jobs of --users users (<spool>/<uid>/<job id>.json, as the daemon lays it out),
each with a report; a --hostile fraction of the jobs instead have a FIFO, a symlink to
/dev/zero, a 1 GB sparse file or a report owned by another uid. Then times --rounds
rounds of merge() (read, check, vote, learn) and reports the best and the median, and
the memory the tracker keeps (cells, votes, problems said). Every hostile file must be
refused and every round must end: the figures are only printed if so.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from slurm_gavel.daemon.progress_learning import ProgressTracker  # noqa: E402
from slurm_gavel.domain.cluster_model import (  # noqa: E402
    ClusterSnapshot,
    JobState,
    NodeSlice,
    ObservedJob,
)
from slurm_gavel.domain.model import Job  # noqa: E402
from slurm_gavel.domain.throughputs import ThroughputTable  # noqa: E402
from slurm_gavel.job.progress import FORMAT  # noqa: E402

NOW = 1_000_000.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--jobs", type=int, default=1000)
    ap.add_argument("--users", type=int, default=50)
    ap.add_argument("--hostile", type=float, default=0.1, help="fraction of hostile files")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("run as root: the benchmark plays several users")
    # one progress_refused line per hostile file otherwise; they are counted below
    logging.getLogger("slurm_gavel.daemon").addHandler(logging.NullHandler())
    base = Path(tempfile.mkdtemp(prefix="gavel-bench-spool-"))
    root = base / "progress"
    try:
        table = ThroughputTable(alone={("A3C", 1): {"v100": 10.0}})
        jobs = [
            ObservedJob(
                Job(str(i), "A3C", arrival_time=NOW - 3600),
                JobState.RUNNING,
                "v100",
                (NodeSlice("v100-0", 1),),
                user_id=10000 + i % args.users,
            )
            for i in range(args.jobs)
        ]
        tracker = ProgressTracker(root, table=table)
        tracker.merge(ClusterSnapshot(NOW, (), tuple(jobs)))  # makes the user folders
        every = int(1 / args.hostile) if args.hostile > 0 else 0
        hostile = 0
        for n, o in enumerate(jobs):
            assert o.user_id is not None
            path = root / str(o.user_id) / f"{o.job.id}.json"
            kind = n // every % 4 if every and n % every == 0 else -1
            hostile += kind >= 0
            if kind == 0:
                os.mkfifo(path)
            elif kind == 1:
                path.symlink_to("/dev/zero")
            elif kind == 2:
                with open(path, "wb") as f:
                    f.truncate(2**30)
            else:
                doc = {"format": FORMAT, "job_id": o.job.id, "steps": 10, "steps_per_s": 10.5,
                       "restart_count": 0, "state": "running", "updated": NOW - 5}  # fmt: skip
                path.write_text(json.dumps(doc))
                owner = 65534 if kind == 3 else o.user_id
                os.chown(path, owner, owner)
        times = []
        for r in range(args.rounds):
            t0 = time.perf_counter()
            got = tracker.merge(ClusterSnapshot(NOW + r, (), tuple(jobs)))
            times.append(time.perf_counter() - t0)
        reported = sum(o.steps_done == 10 for o in got.jobs)
        assert reported == args.jobs - hostile, (reported, args.jobs, hostile)
        assert len(tracker._said) == hostile
        votes = sum(len(c.votes) for c in tracker.cells.values())
        print(
            f"{args.jobs} jobs, {args.users} users, {hostile} hostile files: merge "
            f"{min(times) * 1000:.1f} ms best, {statistics.median(times) * 1000:.1f} ms median "
            f"of {args.rounds}; kept: {len(tracker.cells)} cells, {votes} votes, "
            f"{len(tracker._said)} problems"
        )
    finally:
        shutil.rmtree(base)


if __name__ == "__main__":
    main()
