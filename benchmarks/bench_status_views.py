"""Time the daemon's status views per save, public against private (status_privacy).

    python benchmarks/bench_status_views.py --users 1000 --jobs-per-user 5 --repeats 5

Builds a state document of users x jobs-per-user running jobs (uids 10000 on) and
times Publisher.save_view (daemon/publish.py) on a fresh state directory under
--dir: public writes status.json with every row; private writes status.json
without rows and one status.d/<uid>.json per user (each fsynced, the folder once).
Run as root: each view is chowned to its uid. Quoted: the median of --repeats.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from slurm_gavel.daemon.publish import Publisher
from slurm_gavel.daemon.state_store import StateStore


def state_doc(users: int, per_user: int) -> dict[str, Any]:
    jobs = {
        str(i): {"user": f"u{i % users}", "user_id": 10000 + i % users, "account": "a",
                 "job_type": "A3C", "scale_factor": 1, "state": "running",
                 "gpu_type": "v100", "nodes": [[f"n{i}", 1]]}
        for i in range(users * per_user)
    }  # fmt: skip
    return {"saved_at": time.time(), "daemon": {"policy": "max_min_fairness"},
            "scheduler": {"round_index": 1, "jobs": {}}, "jobs": jobs,
            "cluster": {"capacity": {"v100": users * per_user}}}  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--users", type=int, default=1000)
    p.add_argument("--jobs-per-user", type=int, default=5)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--dir", default="/tmp", help="where the state directory is made")
    args = p.parse_args()
    doc = state_doc(args.users, args.jobs_per_user)
    for mode in ("public", "private"):
        d = Path(tempfile.mkdtemp(dir=args.dir))
        store = StateStore(d)
        store.acquire()
        try:
            pub = Publisher(store, None)
            pub.resolve_privacy(mode)
            times = []
            for _ in range(args.repeats):
                t = time.perf_counter()
                pub.save_view(doc)
                times.append(time.perf_counter() - t)
        finally:
            store.release()
            shutil.rmtree(d)
        print(f"{mode}: {args.users} users x {args.jobs_per_user} jobs: save_view median "
              f"{statistics.median(times) * 1000:.0f} ms (all: "
              f"{', '.join(f'{x * 1000:.0f}' for x in times)})")  # fmt: skip


if __name__ == "__main__":
    main()
