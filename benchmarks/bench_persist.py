"""Time the daemon's per-round state saves and status views at N jobs, without Slurm.

    python benchmarks/bench_persist.py --jobs 20000 --rounds 5
    python benchmarks/bench_persist.py --jobs 5000,20000 --compare /path/to/other/checkout

Runs the real daemon (slurm_gavel.daemon.daemon.Daemon, its state folder in a
temporary directory) on the simulated backend (backends/simulated.py) with --jobs
managed jobs on --topology (default 1,024 GPUs: 128 nodes x 8), every job on a learned
row of its own (a measured cell on one GPU type at its type's figure times a seeded
factor in 0.5-1.5, as bench_round.py --distinct-rows), a job mix as bench_round.py
submits (70% 1-GPU, 20% 2, 10% 4) of 100 users. Round 0 (the first allocation) is
not counted; then --rounds rounds, the simulated clock moved on by round_seconds
before each (jobs report their rates, some rows change, the allocation is solved
again, the mechanism rotates). --silent: no job reports (bench_round.py's sleep jobs
on Slurm): the rows and the allocation stay, the mechanism rotates.

Each part of a round is timed by wrapping the product's own function (nothing of it is
copied here), CPU seconds (process_time) exclusive of the parts nested in it:

    copy        the round's pre-round copy of the scheduler state (as JSON)
    to_json     SchedulerState.to_json (the scheduler's state as plain data)
    rows        rows_to_json: the learned rows (in to_json and the inflight record)
    jobs view   jobs_view: each job's state, place, reason and row (status_records.py)
    document    state_document: the rest of state.json (cluster, progress, ...)
    encode      StateWriter.save, StateStore.save and save_view: the JSON encoding of
                state.json and status.json
    write       the atomic writes (temporary file, fsync, rename, directory fsync);
                wall seconds are also printed for it
    status view status_view: the public view (status_view.py), user views in private
    comments    Publisher.admin_comments (which reasons changed)
    scheduler   the rest of run_round: accounting, the mechanism, the solve
    backend     the simulated cluster's observe and act (not the daemon's work)
    other       the rest of Daemon.round (metrics, events, bookkeeping)

and prints, per --jobs, each part's median over the rounds, the persist total (copy to
comments) and the whole round's CPU, and how many status.json records kept their text
from the save before (public view; checkouts that keep them). --compare DIR runs the
same bench on the code in DIR (another checkout: `git worktree add /tmp/before
<commit>`) and here, alternately, --repeats times each, and prints both side by side
(the medians over all their rounds).
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PARTS = ("copy", "to_json", "rows", "jobs view", "document", "encode", "write",
         "status view", "comments")  # fmt: skip
OTHER = ("scheduler", "backend", "other")


class Clock:
    """Exclusive CPU (and wall) seconds per label over nested wrapped calls."""

    def __init__(self) -> None:
        self.cpu: dict[str, float] = {}
        self.wall: dict[str, float] = {}
        self._stack: list[list[float]] = []  # [cpu0, wall0, child cpu, child wall]

    def wrap(self, label: str, f: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*a: Any, **kw: Any) -> Any:
            frame = [time.process_time(), time.perf_counter(), 0.0, 0.0]
            self._stack.append(frame)
            try:
                return f(*a, **kw)
            finally:
                self._stack.pop()
                cpu = time.process_time() - frame[0]
                wall = time.perf_counter() - frame[1]
                self.cpu[label] = self.cpu.get(label, 0.0) + cpu - frame[2]
                self.wall[label] = self.wall.get(label, 0.0) + wall - frame[3]
                if self._stack:
                    self._stack[-1][2] += cpu
                    self._stack[-1][3] += wall

        timed.__wrapped__ = f  # type: ignore[attr-defined]
        return timed

    def reset(self) -> None:
        self.cpu.clear()
        self.wall.clear()


def patch(clock: Clock, owner: Any, name: str, label: str) -> None:
    """Wrap owner.name (a class's method, or a module's function) and every module's
    binding of the same function (`from x import f`); a name the code at hand lacks
    is left alone, so the bench runs on older and newer checkouts alike."""
    f = getattr(owner, name, None)
    if f is None:
        return
    wrapped = clock.wrap(label, f)
    if isinstance(owner, type):
        static = isinstance(inspect.getattr_static(owner, name), staticmethod)
        setattr(owner, name, staticmethod(wrapped) if static else wrapped)
        return
    for m in list(sys.modules.values()):
        if m is not None and getattr(m, name, None) is f:
            setattr(m, name, wrapped)


class JsonOf:
    """A module's `json` with dumps and loads timed (the daemon's pre-round copy)."""

    def __init__(self, clock: Clock, label: str) -> None:
        self.dumps = clock.wrap(label, json.dumps)
        self.loads = clock.wrap(label, json.loads)

    def __getattr__(self, name: str) -> Any:
        return getattr(json, name)


def child(
    jobs: int, rounds: int, topology: str, privacy: str, seed: int, silent: bool = False
) -> dict[str, Any]:
    """One bench run in this process: per round, CPU seconds per part."""
    import gc
    from dataclasses import replace

    import slurm_gavel.daemon.daemon as daemon_mod
    from slurm_gavel.backends.cluster_spec import parse_cluster_spec
    from slurm_gavel.backends.simulated import SimulatedCluster
    from slurm_gavel.core import scheduler, scheduler_state
    from slurm_gavel.core.learned_rows import job_rows_doc
    from slurm_gavel.core.learned_rows.job_rows import Measured
    from slurm_gavel.daemon import publish, state_doc, state_store, state_writer, status_records

    try:  # the state's text from parts encoded before (absent in older checkouts)
        state_encode: Any = importlib.import_module("slurm_gavel.daemon.state_encode")
    except ImportError:
        state_encode = None
    from slurm_gavel.daemon.config import parse_config
    from slurm_gavel.daemon.daemon import Daemon
    from slurm_gavel.daemon.metrics import DaemonMetrics
    from slurm_gavel.domain.cluster_model import ClusterSnapshot
    from slurm_gavel.domain.model import Job
    from slurm_gavel.domain.throughputs import load_table

    table = load_table()
    kinds = [(jt, sf) for jt in table.job_types for sf in (1, 2, 4) if table.has(jt, sf)]
    rng = random.Random(seed)
    sizes = rng.choices([1, 2, 4], weights=[0.7, 0.2, 0.1], k=jobs)
    job_list = []
    for i, sf in enumerate(sizes):
        jt = rng.choice([k for k in kinds if k[1] == sf])[0]
        u = i % 100
        job_list.append(Job(str(1000 + i), jt, sf, total_steps=1e12, account=f"acct{u % 10}",
                            user=f"user{u}", partition="gpu"))  # fmt: skip

    uid = {j.id: 10000 + int(j.id) % 100 for j in job_list}

    class Cluster(SimulatedCluster):
        """Every job with its owner's uid, as Slurm gives it; with silent, no job
        reports its steps or rate (bench_round.py's sleep jobs)."""

        def observe(self) -> ClusterSnapshot:
            snap = super().observe()
            jobs = [replace(o, user_id=uid.get(o.job.id)) for o in snap.jobs]
            if silent:
                jobs = [replace(o, measured_throughput=None, steps_done=None) for o in jobs]
            return replace(snap, jobs=tuple(jobs))

    sim = Cluster(parse_cluster_spec(topology, table), job_list, table)
    state_dir = Path(tempfile.mkdtemp(prefix="bench-persist-"))
    try:
        cfg = parse_config({
            "partitions": ["gpu"], "round_seconds": 60, "checkpoint": {"grace_seconds": 10},
            "state_dir": str(state_dir / "state"), "log_format": "kv", "log_level": "error",
            "status_privacy": privacy,
        })  # fmt: skip
        d = Daemon(cfg, sim, table=table, metrics=DaemonMetrics())
        d.start()
        learned = d.state.plugins.learned_rows
        for j in job_list:
            prior = table.row(j.job_type, j.scale_factor)
            gpu = rng.choice(sorted(prior))
            learned.measured[j.id] = {gpu: Measured(prior[gpu] * rng.uniform(0.5, 1.5), 600.0,
                                                    0.0, 0.0, 0)}  # fmt: skip
            learned.scale_factor[j.id] = j.scale_factor
            learned.cells_measured += 1
        learned.revision += 1

        clock = Clock()
        if "json" in vars(daemon_mod):  # the copy through json of older checkouts
            vars(daemon_mod)["json"] = JsonOf(clock, "copy")
        patch(clock, scheduler_state.SchedulerState, "to_json", "to_json")
        patch(clock, job_rows_doc, "rows_to_json", "rows")
        patch(clock, status_records, "jobs_view", "jobs view")
        patch(clock, state_doc, "state_document", "document")
        patch(clock, state_writer.StateWriter, "save", "encode")
        patch(clock, state_store.StateStore, "save", "encode")
        patch(clock, state_store.StateStore, "save_view", "encode")
        patch(clock, state_store.StateStore, "_write_file", "write")
        if state_encode is not None:
            patch(clock, state_encode.PreRound, "of", "copy")
            patch(clock, state_encode.PreRound, "restore", "copy")
        patch(clock, publish, "status_view", "status view")
        patch(clock, publish, "user_views", "status view")
        patch(clock, publish, "public_summary", "status view")
        patch(clock, publish, "write_views", "write")
        patch(clock, publish.Publisher, "admin_comments", "comments")
        patch(clock, scheduler, "run_round", "scheduler")
        patch(clock, Cluster, "observe", "backend")
        patch(clock, SimulatedCluster, "act", "backend")
        patch(clock, Daemon, "round", "other")

        out: list[dict[str, Any]] = []
        for r in range(rounds + 1):
            clock.reset()
            gc.collect()  # what Daemon.run() does between rounds
            t = time.perf_counter()
            d.round()
            wall = time.perf_counter() - t
            if r:  # round 0 allocates from nothing: not a steady round
                # status records whose text the save kept (absent in older checkouts)
                kept = getattr(getattr(d.publisher, "view_texts", None), "reused", None)
                out.append({"cpu": dict(clock.cpu), "wall": dict(clock.wall), "round_wall": wall,
                            "status_kept": kept})  # fmt: skip
            sim.advance(sim.clock + 60.0)
        size = {p.name: p.stat().st_size for p in (state_dir / "state").glob("*.json")}
        d.store.release()
        import slurm_gavel

        return {"rounds": out, "files": size, "code": str(Path(slurm_gavel.__file__).parent)}
    finally:
        shutil.rmtree(state_dir, ignore_errors=True)


def medians(rounds: list[dict[str, Any]]) -> dict[str, float]:
    med: dict[str, float] = {}
    for part in (*PARTS, *OTHER):
        med[part] = statistics.median(r["cpu"].get(part, 0.0) for r in rounds)
    med["write wall"] = statistics.median(r["wall"].get("write", 0.0) for r in rounds)
    med["persist"] = statistics.median(sum(r["cpu"].get(p, 0.0) for p in PARTS) for r in rounds)
    med["round"] = statistics.median(sum(r["cpu"].values()) for r in rounds)
    med["round wall"] = statistics.median(r["round_wall"] for r in rounds)
    return med


ROWS = (*PARTS, "write wall", "persist", *OTHER, "round", "round wall")


def child_json(argv: list[str], env: dict[str, str] | None = None) -> dict[str, Any]:
    """Run a timed child process; its last stdout line is its JSON result."""
    res = subprocess.run(argv, capture_output=True, text=True, check=False, env=env)
    if res.returncode:
        raise SystemExit(f"{' '.join(argv)}:\n{res.stderr[-3000:]}")
    return json.loads(res.stdout.splitlines()[-1])


def run_child(code: Path, a: argparse.Namespace, jobs: int) -> dict[str, Any]:
    argv = [sys.executable, __file__, "--child", "--code", str(code), "--jobs", str(jobs),
            "--rounds", str(a.rounds), "--topology", a.topology, "--privacy", a.privacy,
            "--seed", str(a.seed), *(["--silent"] if a.silent else [])]  # fmt: skip
    return child_json(argv)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--jobs", default="5000,20000", help="comma-separated job counts")
    p.add_argument("--rounds", type=int, default=5, help="timed rounds (after round 0)")
    p.add_argument("--topology", default="v100:48x8,p100:40x8,k80:40x8")
    p.add_argument("--privacy", choices=("public", "private"), default="public")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--silent", action="store_true",
                   help="no job reports its steps or rate: rows and allocation stay")  # fmt: skip
    p.add_argument("--repeats", type=int, default=1, help="runs per checkout (alternating)")
    p.add_argument("--compare", type=Path, help="another checkout: timed beside this one")
    p.add_argument("--code", type=Path, default=ROOT, help=argparse.SUPPRESS)
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.child:
        sys.path.insert(0, str(a.code))
        print(json.dumps(child(int(a.jobs), a.rounds, a.topology, a.privacy, a.seed, a.silent)))
        return
    codes = [("before", a.compare), ("after", ROOT)] if a.compare else [("this", ROOT)]
    print(f"load average {os.getloadavg()[0]:.1f}; {a.topology}; {a.privacy}"
          f"{'; silent jobs' if a.silent else ''}; CPU s per "
          f"round, median of {a.rounds} rounds x {a.repeats} runs")  # fmt: skip
    for jobs in [int(x) for x in a.jobs.split(",")]:
        runs: dict[str, list[dict[str, Any]]] = {name: [] for name, _ in codes}
        files: dict[str, dict[str, int]] = {}
        for _ in range(a.repeats):
            for name, code in codes:
                res = run_child(code, a, jobs)
                runs[name] += res["rounds"]
                files[name] = res["files"]
                print(f"  {jobs} jobs, {name}: {res['code']}; load average "
                      f"{os.getloadavg()[0]:.1f}", file=sys.stderr)  # fmt: skip
        med = {name: medians(rs) for name, rs in runs.items()}
        print(f"\n{jobs} jobs | " + " | ".join(name for name, _ in codes))
        for row in ROWS:
            print(f"{row:12s} | " + " | ".join(f"{med[name][row]:7.3f}" for name, _ in codes))
        for name, _ in codes:
            sizes = ", ".join(f"{k} {v / 1e6:.1f} MB" for k, v in sorted(files[name].items()))
            print(f"files ({name}): {sizes}")
        for name, _ in codes:
            kept = [r["status_kept"] for r in runs[name] if r.get("status_kept") is not None]
            if kept:
                print(f"status.json records whose text was kept ({name}): median "
                      f"{statistics.median(kept):.0f} of {jobs} per round")  # fmt: skip
    print(f"load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
