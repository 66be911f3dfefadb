"""The daemon's own CPU per live round at N managed jobs, on the in-memory Slurm.

    python benchmarks/bench_round_fake.py --jobs 5000,20000 --rounds 4
    python benchmarks/bench_round_fake.py --jobs 20000 --compare /path/to/other/checkout
    python benchmarks/bench_round_fake.py --jobs 20000 --rounds 2 --profile /tmp/p.prof

Runs the real daemon (slurm_gavel.daemon.daemon.Daemon, its state folder in a
temporary directory) on the unmodified SlurmBackend over the fake Slurm
(slurm_gavel.testing: FakeSlurm behind FakeTransport), so the round is the CLI
backend's logic without slurmctld: --jobs managed jobs held on arrival
(bench_round.py's mix: 70% 1-GPU, 20% 2, 10% 4, of 100 users), on --topology (default
1,024 GPUs: 128 nodes x 8), every job on a learned row of its own (bench_round.py
--distinct-rows). The jobs report nothing (bench_round.py's sleep jobs): the rows and
the allocation stay, the mechanism rotates, and every job saves when signalled. Round
0 (the first after a start) is timed apart; then --rounds rounds, the fake's clock
moved on by round_seconds before each.

CPU seconds (thread_time; the daemon's round runs its act's signal on a second thread,
whose CPU process_time counts as well: both are printed) per part, exclusive of the
parts nested in it, by wrapping the product's own functions:

    fake slurm  the fake's commands and its clock (Slurm's work, not the daemon's)
    observe     SlurmBackend.observe: records to snapshot and view
    scheduler   scheduler.run_round: accounting, the mechanism (and a solve)
    act         SlurmBackend.act, its commands apart
    persist     the state saves and the status views (bench_persist.py's parts)
    other       the rest of Daemon.round

--compare DIR runs the same bench on the code in DIR (another checkout) and here,
alternately, --repeats times each. --profile FILE writes a cProfile (CPU clock) of the
timed rounds of one run.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PARTS = ("fake slurm", "observe", "scheduler", "act", "persist", "other")


class ThreadClock:
    """Exclusive CPU seconds (thread_time) per label over nested wrapped calls, each
    thread its own stack (the act signals from a second thread)."""

    def __init__(self) -> None:
        self.cpu: dict[str, float] = {}
        self._local = threading.local()
        self._lock = threading.Lock()

    def wrap(self, label: str, f: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*a: Any, **kw: Any) -> Any:
            stack = self._local.__dict__.setdefault("stack", [])
            frame = [time.thread_time(), 0.0]
            stack.append(frame)
            try:
                return f(*a, **kw)
            finally:
                stack.pop()
                cpu = time.thread_time() - frame[0]
                with self._lock:
                    self.cpu[label] = self.cpu.get(label, 0.0) + cpu - frame[1]
                if stack:
                    stack[-1][1] += cpu

        timed.__wrapped__ = f  # type: ignore[attr-defined]
        return timed

    def reset(self) -> None:
        self.cpu.clear()


def child(a: argparse.Namespace) -> dict[str, Any]:
    import cProfile
    import gc

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from bench_persist import patch as patch_with

    def patch(clock: ThreadClock, owner: Any, name: str, label: str) -> None:
        """bench_persist.patch with this clock (it only calls clock.wrap)."""
        patch_with(clock, owner, name, label)  # type: ignore[arg-type]

    from slurm_gavel.backends.slurm.backend import SlurmBackend
    from slurm_gavel.core import scheduler, scheduler_state
    from slurm_gavel.core.learned_rows import job_rows_doc
    from slurm_gavel.core.learned_rows.job_rows import Measured
    from slurm_gavel.daemon import publish, state_doc, state_store, state_writer, status_records
    from slurm_gavel.daemon.config import parse_config
    from slurm_gavel.daemon.daemon import Daemon
    from slurm_gavel.daemon.metrics import DaemonMetrics
    from slurm_gavel.domain.throughputs import load_table
    from slurm_gavel.testing import FakeSlurm, fake_backend
    from slurm_gavel.testing.cluster import FakeSlurm as FakeSlurmCls
    from slurm_gavel.testing.fake_transport import FakeTransport

    try:
        from slurm_gavel.daemon import state_encode
    except ImportError:  # older checkouts
        state_encode = None  # type: ignore[assignment]

    jobs = int(a.jobs)
    table = load_table()
    kinds = [(jt, sf) for jt in table.job_types for sf in (1, 2, 4) if table.has(jt, sf)]
    rng = random.Random(a.seed)
    slurm = FakeSlurm(a.topology, cpus=64, memory_mb=512000)
    sizes = rng.choices([1, 2, 4], weights=[0.7, 0.2, 0.1], k=jobs)
    scales: dict[str, tuple[str, int]] = {}
    for i, sf in enumerate(sizes):
        jt = rng.choice([k for k in kinds if k[1] == sf])[0]
        u = i % 100
        job_id = slurm.submit(f"gavel:type={jt},scale={sf}", user=f"user{u}",
                              user_id=10000 + u)  # fmt: skip
        scales[job_id] = (jt, sf)
    backend = fake_backend(slurm, grace_s=10)
    state_dir = Path(tempfile.mkdtemp(prefix="bench-round-fake-"))
    try:
        cfg = parse_config({
            "partitions": ["gpu"], "round_seconds": 60, "checkpoint": {"grace_seconds": 10},
            "state_dir": str(state_dir / "state"), "log_format": "kv", "log_level": "error",
        })  # fmt: skip
        d = Daemon(cfg, backend, table=table, metrics=DaemonMetrics())
        d.start()
        learned = d.state.plugins.learned_rows
        for job_id, (jt, sf) in scales.items():  # bench_round.py --distinct-rows
            prior = table.row(jt, sf)
            gpu = rng.choice(sorted(prior))
            learned.measured[job_id] = {gpu: Measured(prior[gpu] * rng.uniform(0.5, 1.5), 600.0,
                                                      0.0, 0.0, 0)}  # fmt: skip
            learned.scale_factor[job_id] = sf
            learned.cells_measured += 1
        learned.revision += 1

        clock = ThreadClock()
        for name in ("read_nodes", "read_reservations", "read_jobs", "read_ended", "states",
                     "steps_answer", "hold", "release", "place", "send_signal", "requeuehold",
                     "relabel", "admin_comment", "between_rounds"):  # fmt: skip
            patch(clock, FakeTransport, name, "fake slurm")
        patch(clock, FakeSlurmCls, "advance", "fake slurm")
        if a.detail:  # finer parts, counted apart from (not in) the part they are in
            from slurm_gavel.backends.slurm import view
            from slurm_gavel.core import mechanism_plugin, round_jobs
            from slurm_gavel.daemon import metrics

            for owner, name, label in (
                (view, "build_view", "build_view"), (publish, "status_view", "status_view"),
                (status_records, "jobs_view", "jobs_view"),
                (job_rows_doc, "rows_to_json", "rows"),
                (state_writer.StateWriter, "save", "encode"),
                (state_store.StateStore, "save", "encode"),
                (state_store.StateStore, "save_view", "encode"),
                (round_jobs, "round_jobs", "round_jobs"),
                (mechanism_plugin.Mechanism, "assign", "assign"),
                (metrics.DaemonMetrics, "record_round", "metrics"),
                (publish.Publisher, "admin_comments", "admin_comments"),
            ):  # fmt: skip
                patch(clock, owner, name, label)
        patch(clock, SlurmBackend, "observe", "observe")
        patch(clock, SlurmBackend, "act", "act")
        patch(clock, scheduler, "run_round", "scheduler")
        persist_parts: tuple[tuple[Any, str], ...] = (
            (scheduler_state.SchedulerState, "to_json"), (job_rows_doc, "rows_to_json"),
            (status_records, "jobs_view"), (state_doc, "state_document"),
            (state_writer.StateWriter, "save"), (state_store.StateStore, "save"),
            (state_store.StateStore, "save_view"), (publish, "status_view"),
            (publish, "user_views"), (publish, "public_summary"), (publish, "write_views"),
            (publish.Publisher, "admin_comments"),
        )  # fmt: skip
        for owner, name in persist_parts:
            patch(clock, owner, name, "persist")
        if state_encode is not None:
            patch(clock, state_encode.PreRound, "of", "persist")
            patch(clock, state_encode.PreRound, "restore", "persist")
        patch(clock, Daemon, "round", "other")

        prof = cProfile.Profile(time.process_time) if a.profile else None
        profiled = {int(x) for x in a.profile_rounds.split(",")}
        out: list[dict[str, Any]] = []
        for r in range(a.rounds + 1):
            clock.reset()
            gc.collect()
            t, p = time.perf_counter(), time.process_time()
            if prof is not None and r in profiled:
                prof.enable()
            rep = d.round()
            if prof is not None:
                prof.disable()
            wall, proc = time.perf_counter() - t, time.process_time() - p
            cpu = dict(clock.cpu)
            out.append({
                "cpu": cpu, "daemon": sum(v for k, v in cpu.items() if k != "fake slurm"),
                "process": proc - cpu.get("fake slurm", 0.0), "wall": wall,
                "started": len(rep.result.started),
                "preempted": len(rep.result.preempted),
            })  # fmt: skip
            slurm.advance(60.0)
        if prof is not None:
            prof.dump_stats(a.profile)
        d.store.release()
        import slurm_gavel

        return {"rounds": out, "code": str(Path(slurm_gavel.__file__).parent)}
    finally:
        shutil.rmtree(state_dir, ignore_errors=True)


def run_child(code: Path, a: argparse.Namespace, jobs: int) -> dict[str, Any]:
    argv = [sys.executable, __file__, "--child", "--code", str(code), "--jobs", str(jobs),
            "--rounds", str(a.rounds), "--topology", a.topology, "--seed", str(a.seed),
            *(["--profile", a.profile] if a.profile else []),
            *(["--detail"] if a.detail else []), "--profile-rounds", a.profile_rounds]  # fmt: skip
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from bench_persist import child_json

    return child_json(argv, env={**os.environ, "PYTHONPATH": str(code)})


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--jobs", default="5000,20000", help="comma-separated job counts")
    p.add_argument("--rounds", type=int, default=4, help="steady rounds (after round 0)")
    p.add_argument("--topology", default="v100:48x8,p100:40x8,k80:40x8")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--repeats", type=int, default=1, help="runs per checkout (alternating)")
    p.add_argument("--compare", type=Path, help="another checkout: timed beside this one")
    p.add_argument("--detail", action="store_true", help="finer parts (build_view, ...)")
    p.add_argument("--profile", help="cProfile (CPU clock) of the steady rounds, to FILE")
    p.add_argument("--profile-rounds", default="1,2,3,4", help="the rounds --profile covers")
    p.add_argument("--code", type=Path, default=ROOT, help=argparse.SUPPRESS)
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.child:
        sys.path.insert(0, str(a.code))
        print(json.dumps(child(a)))
    else:
        compare(a)


def compare(a: argparse.Namespace) -> None:
    """Each job count's rounds in child processes, this checkout and --compare's in
    turn, and the table of their medians."""
    codes = [("before", a.compare), ("after", ROOT)] if a.compare else [("this", ROOT)]
    print(f"load average {os.getloadavg()[0]:.1f}; {a.topology}; daemon CPU s per round "
          f"(thread_time, the fake's commands apart); steady: median of {a.rounds} rounds x "
          f"{a.repeats} runs")  # fmt: skip
    for jobs in [int(x) for x in a.jobs.split(",")]:
        runs: dict[str, list[list[dict[str, Any]]]] = {name: [] for name, _ in codes}
        for _ in range(a.repeats):
            for name, code in codes:
                res = run_child(code, a, jobs)
                runs[name].append(res["rounds"])
                print(f"  {jobs} jobs, {name}: {res['code']}: daemon CPU per round "
                      + " ".join(f"{r['daemon']:.2f}" for r in res["rounds"])
                      + f"; load average {os.getloadavg()[0]:.1f}", file=sys.stderr)  # fmt: skip
        print(f"\n{jobs} jobs | " + " | ".join(f"{n}: round 0, steady" for n, _ in codes))
        labels = sorted({k for rs in runs[codes[0][0]] for r in rs for k in r["cpu"]} - set(PARTS))
        for row in (*PARTS, *labels, "daemon", "process", "wall"):
            cells = []
            for name, _ in codes:
                first = statistics.median(_get(rs[0], row) for rs in runs[name])
                steady = statistics.median(_get(r, row) for rs in runs[name] for r in rs[1:])
                cells.append(f"{first:6.3f} {steady:6.3f}")
            print(f"{row:11s} | " + " | ".join(cells))
        for name, _ in codes:
            rs = runs[name][0][1:]
            print(
                f"({name}: started/preempted per steady round: "
                + ", ".join(f"{r['started']}/{r['preempted']}" for r in rs)
                + ")"
            )
    print(f"load average {os.getloadavg()[0]:.1f}")


def _get(r: dict[str, Any], row: str) -> float:
    if row in ("daemon", "process", "wall"):
        return float(r[row])
    return float(r["cpu"].get(row, 0.0))


if __name__ == "__main__":
    main()
