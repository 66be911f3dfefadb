"""Time the daemon's round on the real local Slurm cluster with many pending managed jobs.

    .venv/bin/python benchmarks/bench_round.py --jobs 1000 --rounds 5
    .venv/bin/python benchmarks/bench_round.py --slurm 24.11 --topology v100:32x8 --jobs 5000

Starts a private local cluster (tools/local-cluster, default topology: 2 nodes x 4
GPUs of each of v100/p100/k80 = 24 GPUs) in a temporary directory on free ports,
submits --jobs managed jobs (held on arrival by the cluster's job_submit.lua; a
seeded mix of job types and 1/2/4-GPU sizes, each a `sleep`), then runs --rounds
rounds of the real daemon (slurm_gavel.daemon.Daemon with the CLI SlurmCluster,
exactly what `slurm-gavel run` builds) back to back and reports, per round:

    total     observe + allocate + assign + act + the two state saves
    observe   sinfo --json + squeue --json and their parsing
    solve     the policy (only in rounds that reallocate)
    assign    the mechanism
    act       Slurm commands to carry the placement out
    persist   the rest: the state saves (write, fsync, rename) and bookkeeping
    commands  Slurm commands issued in the round, by action kind

Round 0 allocates and starts jobs; later rounds keep them (lease extension).
--reallocate forces a fresh allocation every round (the worst case: a job arrived
or left in every round). The cluster is stopped at the end (--keep leaves it up).
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from slurm_gavel import localcluster  # noqa: E402
from slurm_gavel.commands.run import build_backend  # noqa: E402
from slurm_gavel.config import parse_config  # noqa: E402
from slurm_gavel.daemon import Daemon  # noqa: E402
from slurm_gavel.localcluster_conf import ClusterSpec  # noqa: E402
from slurm_gavel.logs import configure  # noqa: E402
from slurm_gavel.throughputs import load_table  # noqa: E402


class Timed:
    """The backend with its observe() and act() timed (what the daemon calls)."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.observe_s = 0.0
        self.act_s = 0.0

    def observe(self):
        t = time.perf_counter()
        try:
            return self.inner.observe()
        finally:
            self.observe_s = time.perf_counter() - t

    def act(self, placement):
        t = time.perf_counter()
        try:
            return self.inner.act(placement)
        finally:
            self.act_s = time.perf_counter() - t

    @property
    def commands_issued(self) -> int:
        return self.inner.commands_issued


def submit(env: dict[str, str], n: int, seed: int) -> None:
    table = load_table()
    kinds = [(jt, sf) for jt in table.job_types for sf in (1, 2, 4) if table.has(jt, sf)]
    rng = random.Random(seed)
    # Philly-like: mostly 1-GPU jobs, some 2 and 4.
    sizes = rng.choices([1, 2, 4], weights=[0.7, 0.2, 0.1], k=n)
    argvs = []
    for sf in sizes:
        jt = rng.choice([k for k in kinds if k[1] == sf])[0]
        comment = f"--comment=gavel:type={jt},scale={sf}"
        # Checkpoint-aware like a real managed job: the signal means exit 99 (requeue-hold).
        wrap = "trap 'exit 99' USR1; sleep 3600 & wait"
        argvs.append(["sbatch", "-p", "gpu", "-o", "/dev/null", comment, "--wrap", wrap])

    def one(argv: list[str]) -> None:
        subprocess.run(argv, env=env, check=True, capture_output=True, timeout=60)

    with ThreadPoolExecutor(4) as pool:
        list(pool.map(one, argvs))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--policy", default="max_min_fairness")
    ap.add_argument("--reallocate", action="store_true", help="reallocate in every round")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--keep", action="store_true", help="leave the cluster running")
    ap.add_argument("--slurm", default="22.05", help="Slurm release (tools/local-cluster --slurm)")
    ap.add_argument("--topology", default=ClusterSpec().topology, help="TYPE:NODESxGPUS,...")
    args = ap.parse_args()

    work = Path(tempfile.mkdtemp(prefix="bench-round-"))
    run = work / "cluster"
    t0 = time.perf_counter()
    run.mkdir(mode=0o755)
    work.chmod(0o755)  # 26.05's slurmctld runs as user slurm
    spec = ClusterSpec(topology=args.topology, slurm=args.slurm)
    localcluster.up(spec, run, port_base_auto=True)
    # SLURM_CONF, and for a chroot release the client wrappers first on PATH: the
    # daemon's backend calls sinfo/squeue/scontrol by name, as in production.
    env = localcluster.slurm_env(run)
    os.environ.update(SLURM_CONF=env["SLURM_CONF"], PATH=env["PATH"])
    print(f"cluster up in {time.perf_counter() - t0:.1f} s ({run})", file=sys.stderr)
    try:
        t0 = time.perf_counter()
        submit(env, args.jobs, args.seed)
        print(f"submitted {args.jobs} jobs in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
        cfg = parse_config({
            "partitions": ["gpu"], "policy": args.policy, "round_seconds": 60,
            "checkpoint": {"grace_seconds": 10}, "state_dir": str(work / "state"),
            "log_format": "kv", "log_level": "warning",
        })  # fmt: skip
        configure("kv", "warning")  # per-job action failures, if any, on stderr
        backend = Timed(build_backend(cfg))
        daemon = Daemon(cfg, backend)
        daemon.start()
        rows = []
        print("round  total_s  observe_s  solve_s  assign_s  act_s  persist_s  jobs  started"
              "  kept  commands (by kind)")  # fmt: skip
        for r in range(args.rounds):
            if args.reallocate:
                daemon.state.allocation_key = ""  # as if the job set changed
            before = Counter(backend.inner.commands.counts)
            t = time.perf_counter()
            report = daemon.round()
            total = time.perf_counter() - t
            kinds = Counter(backend.inner.commands.counts) - before
            persist = total - backend.observe_s - backend.act_s - report.solve_seconds - (
                report.mechanism_seconds)  # fmt: skip
            rows.append((total, sum(kinds.values())))
            res = report.result
            print(
                f"{r:5d}  {total:7.3f}  {backend.observe_s:9.3f}  {report.solve_seconds:7.3f}  "
                f"{report.mechanism_seconds:8.3f}  {backend.act_s:5.3f}  {persist:9.3f}  "
                f"{report.active_jobs:4d}  {len(res.started):7d}  {len(res.kept):4d}  "
                f"{sum(kinds.values())} {dict(sorted(kinds.items()))}"
            )
        daemon.store.release()
        totals = [t for t, _ in rows]
        print(f"median round {statistics.median(totals):.3f} s, max {max(totals):.3f} s, "
              f"commands per round median {statistics.median(c for _, c in rows)}")  # fmt: skip
    finally:
        if not args.keep:
            localcluster.down(run)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
