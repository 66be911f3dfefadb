"""Time the daemon's round on the real local Slurm cluster with many pending managed jobs.

    .venv/bin/python benchmarks/bench_round.py --jobs 1000 --rounds 5
    .venv/bin/python benchmarks/bench_round.py --slurm 24.11 --topology v100:32x8 --jobs 5000

Starts a private local cluster (tools/local-cluster, default topology: 2 nodes x 4
GPUs of each of v100/p100/k80 = 24 GPUs) in a temporary directory on free ports,
submits --jobs managed jobs (held on arrival by the cluster's job_submit.lua; a
seeded mix of job types and 1/2/4-GPU sizes, each a `sleep`), then runs --rounds
rounds of the real daemon (slurm_gavel.daemon.daemon.Daemon with the CLI SlurmBackend,
exactly what `slurm-gavel run` builds) back to back and reports, per round:

    total     observe + allocate + assign + act + the two state saves
    observe   the nodes' JSON, the job listing, the JSON of new or changed jobs
              (slurm/cli/listing.py), and their parsing
    solve     the policy (only in rounds that reallocate)
    assign    the mechanism
    act       Slurm commands to carry the placement out
    persist   the rest: the state saves (write, fsync, rename) and bookkeeping
    commands  Slurm commands issued in the round, by action kind

and, for the reads: cmd_s, the wall seconds of the observe commands themselves
(sinfo/scontrol/squeue, Slurm's side and its JSON dump, the listing included), and
json_kb, the bytes of JSON they printed (what observe parses); then how many jobs'
JSON the round read (full: every job's) and the listing's size.

Round 0 allocates and starts jobs; later rounds keep them (lease extension).
--pause S waits S seconds before each later round, so that the jobs round 0
released have started (a steady round, as in production where rounds are minutes
apart). --reallocate forces a fresh allocation every round (the worst case: a job
arrived or left in every round). --finished N then submits N short unmanaged jobs
(a job array of `true`), waits until they have all finished (slurmctld keeps them
for MinJobAge = 300 s) and runs one more round: its json_kb against the rounds
before shows whether the JSON read per round grows with finished jobs. --alone then
times the round's two observe commands by themselves (wall and CPU seconds), and
signals the running jobs by themselves: how long Slurm takes until all have exited
and been requeue-held (the exit flood a rotation round waits through). --timeline
prints each round's Slurm commands in the order issued (start, in seconds into the
round, and duration): in a rotation round it shows which step sat in slurmctld while
the signalled jobs exited. --accounting runs slurmdbd beside slurmctld, as sites do:
jobs then get an account and QOS, which a new job's listing text must name for the
first round to build it from text (without, they print "(null)" and that round reads
every job's JSON). --rest uses the slurmrestd backend (SlurmBackend, on a unix
socket); its requests count as rest:KIND, slurmrestd's CPU as slurmctld's, and it
has no listing (every job's JSON each round). --distinct-rows gives every managed job a
row of its own, as at a centre where each job has run and reported its rate: before
round 0 each job gets a measured cell on one GPU type (its type's figure times a
seeded factor in 0.5-1.5), in the learned rows a restarted daemon loads from its state
file. --restart N then stops the daemon and starts a new one (a new backend, the same
state folder: the saved state, its learned rows included, is loaded, and the jobs it
managed are resumed), and runs N more rounds: its first is the first round after a
start with every job known. The cluster is stopped and its work
folder removed at the end (--keep leaves both).
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import os
import pstats
import random
import resource
import shutil
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

from slurm_gavel.commands.run import build_backend  # noqa: E402
from slurm_gavel.daemon.config import parse_config  # noqa: E402
from slurm_gavel.daemon.daemon import Daemon  # noqa: E402
from slurm_gavel.daemon.logs import configure  # noqa: E402
from slurm_gavel.domain.throughputs import load_table  # noqa: E402
from slurm_gavel_dev import localcluster  # noqa: E402
from slurm_gavel_dev.localcluster_conf import ClusterSpec  # noqa: E402
from slurm_gavel_dev.localcluster_rest import rest_up  # noqa: E402


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

    def between_rounds(self) -> None:
        self.inner.between_rounds()

    def resume(self, job_ids) -> None:
        """The saved state's jobs, told to a restarted daemon's backend as without the
        timer (backend_hooks.Resumable): its first round watches them."""
        self.inner.resume(job_ids)


class CountedCommands:
    """The backend's SlurmCommands with the bytes each kind printed counted, and each
    command's start and seconds kept (the round's timeline: which step waited on what)."""

    def __init__(self, commands) -> None:
        self.commands = commands
        self.stdout_bytes: Counter[str] = Counter()
        self.timeline: list[tuple[float, str, float]] = []  # (start, kind, seconds)
        self._run = commands.run
        commands.run = self.run

    def run(self, kind, argv, **kw):
        t = time.perf_counter()
        res = self._run(kind, argv, **kw)
        self.timeline.append((t, kind, time.perf_counter() - t))
        self.stdout_bytes[kind] += len(res.stdout)
        return res


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process (/proc/PID/stat), in seconds."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def children_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def submit_finished(env: dict[str, str], n: int) -> float:
    """N short unmanaged jobs (one array); returns when none is left waiting or running."""
    t = time.perf_counter()
    arrays = []
    for first in range(0, n, 1000):  # MaxArraySize: 1001 by default
        size = min(n, first + 1000) - first
        argv = ["sbatch", "--parsable", "-p", "gpu", f"--array=0-{size - 1}", "-o", "/dev/null"]
        res = subprocess.run([*argv, "--wrap", "true"], env=env, capture_output=True, text=True,
                             timeout=120)  # fmt: skip
        if res.returncode:
            raise SystemExit(f"{' '.join(argv)}: {res.stderr.strip()}")
        arrays.append(res.stdout.strip().split(";")[0])
    while True:
        left = subprocess.run(["squeue", "-h", "-j", ",".join(arrays), "-o", "%i"], env=env,
                              capture_output=True, text=True, timeout=60).stdout  # fmt: skip
        if not left.strip():
            return time.perf_counter() - t
        time.sleep(2)


def timed(argv: list[str], env: dict[str, str]) -> tuple[float, float, int, int]:
    """Run a command by itself: wall seconds, its CPU seconds, bytes printed, rc."""
    cpu0, t = children_cpu(), time.perf_counter()
    res = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300)
    return time.perf_counter() - t, children_cpu() - cpu0, len(res.stdout), res.returncode


def alone(env: dict[str, str], reads: list[list[str]], signal: str, ctld: int) -> None:
    """--alone: each observe command by itself (3 times), then the exit flood by itself:
    the running jobs signalled in one `scancel --batch` (as a rotation round does; they
    exit 99 and Slurm requeue-holds them), timed until none is RUNNING or COMPLETING."""
    for argv in [*reads, ["squeue", "-h", "-o", "%i %T"]]:
        for _ in range(3):
            wall, cpu, size, _ = timed(argv, env)
            print(f"alone: {' '.join(argv[:2])}{' ...' if len(argv) > 2 else ''}: wall "
                  f"{wall:.2f} s, CPU {cpu:.2f} s, {size / 1024:.0f} KiB; "
                  f"load average {os.getloadavg()[0]:.1f}")  # fmt: skip
    ids = subprocess.run(["squeue", "-h", "-t", "R", "-o", "%i"], env=env, capture_output=True,
                         text=True, timeout=60).stdout.split()  # fmt: skip
    ctld0, t = cpu_seconds(ctld), time.perf_counter()
    wall, _, _, rc = timed(["scancel", f"--signal={signal}", "--batch", *ids], env)
    poll = ["squeue", "-h", "-j", ",".join(ids), "-t", "R,CG", "-o", "%i"]
    while ids and subprocess.run(poll, env=env, capture_output=True, text=True,
                                 timeout=60).stdout.split():  # fmt: skip
        time.sleep(0.1)
    print(f"alone: exit flood: {len(ids)} running jobs signalled in {wall:.2f} s (rc {rc}), "
          f"none running or completing after {time.perf_counter() - t:.2f} s; slurmctld CPU "
          f"{cpu_seconds(ctld) - ctld0:.2f} s; load average {os.getloadavg()[0]:.1f}")  # fmt: skip


def submit(env: dict[str, str], n: int, seed: int, checkpoint_s: float = 0.0) -> None:
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
        # (and kill the sleep: an `exit` leaves the background child orphaned)
        # --checkpoint-s: the seconds a checkpoint takes before the exit (0: at once, the
        # exit flood inside the act's signal; a real checkpoint takes seconds to minutes)
        save = f"sleep {checkpoint_s}; " if checkpoint_s else ""
        wrap = f"trap '{save}kill $! 2>/dev/null; exit 99' USR1; sleep 3600 & wait"
        argvs.append(["sbatch", "-p", "gpu", "-o", "/dev/null", comment, "--wrap", wrap])

    def one(argv: list[str]) -> None:
        subprocess.run(argv, env=env, check=True, capture_output=True, timeout=60)

    with ThreadPoolExecutor(4) as pool:
        list(pool.map(one, argvs))


def distinct_rows(daemon: Daemon, env: dict[str, str], seed: int) -> int:
    """--distinct-rows: every managed job's own measured cell on one GPU type, as if it
    had run there and reported (the learned rows of a centre's running daemon; they go
    into its state file with the first save). Returns the jobs given a row."""
    from slurm_gavel.core.learned_rows.job_rows import Measured
    from slurm_gavel.domain.comment_grammar import parse_comment

    table = load_table()
    out = subprocess.run(["squeue", "-h", "-o", "%i|%k"], env=env, capture_output=True,
                         text=True, timeout=120, check=True).stdout  # fmt: skip
    rng = random.Random(seed)
    rows = daemon.state.plugins.learned_rows
    for line in out.splitlines():
        job_id, _, comment = line.partition("|")
        parsed = parse_comment(comment)
        scale = parsed.scale_factor if parsed is not None else None
        if parsed is None or scale is None or not table.has(parsed.job_type, scale):
            continue
        prior = table.row(parsed.job_type, scale)
        gpu = rng.choice(sorted(prior))
        rate = prior[gpu] * rng.uniform(0.5, 1.5)
        rows.measured[job_id] = {gpu: Measured(rate, 600.0, 0.0, 0.0, 0)}
        rows.scale_factor[job_id] = scale
        rows.cells_measured += 1
    rows.revision += 1
    return len(rows.measured)


def submit_plain(env: dict[str, str], n: int) -> None:
    """N jobs slurm-gavel does not manage, as other users' jobs on a busy cluster: no
    comment (and without accounting no account or QOS: "(null)" in the listing),
    held so that they stay in the queue."""
    argv = ["sbatch", "-p", "gpu", "--hold", "-o", "/dev/null", "--wrap", "sleep 3600"]

    def one(_: int) -> None:
        subprocess.run(argv, env=env, check=True, capture_output=True, timeout=60)

    with ThreadPoolExecutor(4) as pool:
        list(pool.map(one, range(n)))


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
    ap.add_argument(
        "--accounting",
        action="store_true",
        help="with slurmdbd, as sites run: jobs get an account and QOS (without, "
        'they print "(null)", and the first round reads every job\'s JSON)',
    )
    ap.add_argument(
        "--rest",
        action="store_true",
        help="the slurmrestd backend (SlurmBackend, on a unix socket) instead "
        "of the CLI's: it reads every job's JSON each round (no listing)",
    )
    ap.add_argument("--plain", type=int, default=0,
                    help="also N held jobs it does not manage (no comment), as other "
                         "users' jobs on a busy cluster")  # fmt: skip
    ap.add_argument("--pause", type=float, default=0.0, help="seconds before each later round")
    ap.add_argument("--finished", type=int, default=0, help="then N finished jobs, one round")
    ap.add_argument("--checkpoint-s", type=float, default=0.0,
                    help="seconds each job takes to checkpoint after the signal (default 0: "
                         "it exits at once)")  # fmt: skip
    ap.add_argument("--distinct-rows", action="store_true",
                    help="every managed job on a learned row of its own")  # fmt: skip
    ap.add_argument("--restart", type=int, default=0,
                    help="then a new daemon on the same state and cluster, N rounds")  # fmt: skip
    ap.add_argument("--profile", help="cProfile the last of --rounds into this file")
    ap.add_argument("--profile-rounds", help="with --profile: these rounds (0,5), into FILE.R")
    ap.add_argument("--alone", action="store_true",
                    help="then time observe commands, exit flood alone")  # fmt: skip
    ap.add_argument("--timeline", action="store_true",
                    help="print each round's commands in order: start (s into the round) "
                         "kind seconds")  # fmt: skip
    args = ap.parse_args()

    work = Path(tempfile.mkdtemp(prefix="bench-round-"))
    run = work / "cluster"
    t0 = time.perf_counter()
    run.mkdir(mode=0o755)
    work.chmod(0o755)  # 26.05's slurmctld runs as user slurm
    spec = ClusterSpec(topology=args.topology, slurm=args.slurm, accounting=args.accounting)
    localcluster.up(spec, run, port_base_auto=True)
    # SLURM_CONF, and for a chroot release the client wrappers first on PATH: the
    # daemon's backend calls sinfo/squeue/scontrol by name, as in production.
    env = localcluster.slurm_env(run)
    os.environ.update(SLURM_CONF=env["SLURM_CONF"], PATH=env["PATH"])
    print(f"cluster up in {time.perf_counter() - t0:.1f} s ({run})", file=sys.stderr)
    try:
        t0 = time.perf_counter()
        submit(env, args.jobs, args.seed, args.checkpoint_s)
        print(f"submitted {args.jobs} jobs in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
        if args.plain:
            t0 = time.perf_counter()
            submit_plain(env, args.plain)
            print(f"submitted {args.plain} plain jobs in {time.perf_counter() - t0:.1f} s",
                  file=sys.stderr)  # fmt: skip
        rest_conf = {}
        if args.rest:
            sock = rest_up(run)
            rest_conf = {"backend": "rest", "slurm": {"rest_url": f"unix:{sock}"}}
        cfg = parse_config({
            "partitions": ["gpu"], "policy": args.policy, "round_seconds": 60,
            "checkpoint": {"grace_seconds": 10}, "state_dir": str(work / "state"),
            "log_format": "kv", "log_level": "warning", **rest_conf,
        })  # fmt: skip
        configure("kv", "warning")  # per-job action failures, if any, on stderr
        backend = Timed(build_backend(cfg))
        commands = backend.inner.transport.commands
        counted = CountedCommands(commands)
        daemon = Daemon(cfg, backend)
        pids = (localcluster.read_state(run) or {}).get("pids") or {}
        ctld = int(pids.get("slurmctld", 0))
        restd = int(pids.get("slurmrestd", 0))  # its CPU counts as slurmctld's (--rest)
        rest = getattr(backend.inner, "rest", None)

        def counts() -> Counter[str]:
            """Slurm commands by kind; slurmrestd requests as rest:KIND."""
            out = Counter(commands.counts)
            if rest is not None:
                out.update({f"rest:{k}": v for k, v in rest.counts.items()})
            return out

        def server_cpu() -> float:
            """slurmctld's CPU seconds, and slurmrestd's with --rest."""
            return cpu_seconds(ctld) + (cpu_seconds(restd) if restd else 0.0)

        daemon.start()
        if args.distinct_rows:
            print(f"jobs on a learned row of their own: {distinct_rows(daemon, env, args.seed)}")
        rows = []
        print(f"load average before the rounds: {os.getloadavg()[0]:.1f}")
        print("round  total_s  observe_s  cmd_s  json_kb  solve_s  assign_s  act_s  persist_s"
              "  jobs  started  kept  commands (by kind)")  # fmt: skip
        plan = [("round", r) for r in range(args.rounds)]
        if args.finished:
            plan.append(("finished", args.rounds))
        plan += [("restart" if i == 0 else "round", len(plan) + i) for i in range(args.restart)]
        for what, r in plan:
            if what == "restart":
                # A new daemon on the same state folder and cluster: it loads the saved
                # state (the learned rows too) and resumes the jobs it managed.
                daemon.store.release()
                t = time.perf_counter()
                backend = Timed(build_backend(cfg))
                commands = backend.inner.transport.commands
                counted = CountedCommands(commands)
                rest = getattr(backend.inner, "rest", None)
                daemon = Daemon(cfg, backend)
                daemon.start()
                learned = daemon.state.plugins.learned_rows
                print(f"restarted: a new daemon loaded the state in {time.perf_counter() - t:.2f} "
                      f"s ({len(daemon.state.jobs)} jobs, {len(learned.measured)} "
                      f"learned rows); load average {os.getloadavg()[0]:.1f}")  # fmt: skip
                if args.pause:
                    time.sleep(args.pause)
            elif what == "finished":
                took = submit_finished(env, args.finished)
                print(f"{args.finished} short jobs submitted and finished in {took:.0f} s; "
                      f"load average {os.getloadavg()[0]:.1f}")  # fmt: skip
            elif what == "round" and r and args.pause:
                time.sleep(args.pause)
            if args.reallocate:
                daemon.state.allocation_key = ""  # as if the job set changed
            before = counts()
            cpu0, kids0 = time.process_time(), children_cpu()
            ctld0 = server_cpu()
            secs_before = dict(commands.seconds)
            bytes_before = Counter(counted.stdout_bytes)
            profiled = args.profile_rounds.split(",") if args.profile_rounds else [
                str(args.rounds - 1)]  # fmt: skip
            # CPU time (process_time), not wall: on a loaded machine the wall clock
            # charges each function other processes' time slices too
            prof = (cProfile.Profile(time.process_time) if args.profile and str(r) in profiled
                    else None)  # fmt: skip
            counted.timeline.clear()
            t = time.perf_counter()
            if prof:
                prof.enable()
            report = daemon.round()
            total = time.perf_counter() - t
            cpu = (time.process_time() - cpu0, children_cpu() - kids0, server_cpu() - ctld0)
            t = time.perf_counter()
            gc.collect()  # what Daemon.run() does after each round, off the round
            gc_s = time.perf_counter() - t
            if prof:
                prof.disable()
                prof.dump_stats(f"{args.profile}.{r}" if args.profile_rounds else args.profile)
                pstats.Stats(prof).sort_stats("cumulative").print_stats(30)
            kinds = counts() - before
            reads = ("observe", "ended")
            cmd_s = sum(commands.seconds[k] - secs_before.get(k, 0.0) for k in (*reads, "list"))
            json_kb = sum((counted.stdout_bytes - bytes_before)[k] for k in reads) / 1024
            list_kb = (counted.stdout_bytes - bytes_before)["list"] / 1024
            reader = getattr(getattr(backend.inner, "transport", None), "reader", None)
            listed = getattr(reader, "listed", None)  # the CLI's incremental read
            persist = total - backend.observe_s - backend.act_s - report.solve_seconds - (
                report.mechanism_seconds)  # fmt: skip
            rows.append((total, sum(kinds.values())))
            res = report.result
            print(
                f"{r:5d}  {total:7.3f}  {backend.observe_s:9.3f}  {cmd_s:5.3f}  {json_kb:7.0f}  "
                f"{report.solve_seconds:7.3f}  "
                f"{report.mechanism_seconds:8.3f}  {backend.act_s:5.3f}  {persist:9.3f}  "
                f"{report.active_jobs:4d}  {len(res.started):7d}  {len(res.kept):4d}  "
                f"{sum(kinds.values())} {dict(sorted(kinds.items()))}"
            )
            by_kind = {k: round(v - secs_before.get(k, 0.0), 2) for k, v in commands.seconds.items()
                    if v > secs_before.get(k, 0.0)}  # fmt: skip
            if listed is not None:
                print(f"       jobs read as JSON: {listed.last_json_jobs} ({listed.last_read}), "
                      f"changed jobs built from the listing's text: {listed.last_text_jobs}; "
                      f"listing {list_kb:.0f} KiB")  # fmt: skip
            print(f"       command seconds by kind {dict(sorted(by_kind.items()))}; CPU s: daemon "
                  f"{cpu[0]:.2f}, commands {cpu[1]:.2f}, slurmctld {cpu[2]:.2f}; "
                  f"then gc.collect() {gc_s:.2f} s; "
                  f"load average {os.getloadavg()[0]:.1f}")  # fmt: skip
            if args.timeline:
                steps = ", ".join(f"{s - t:.2f} {k} {d:.2f}" for s, k, d in counted.timeline)
                print(f"       timeline (start kind seconds): {steps}")
            # Then what Daemon.run() does next, off the round: the periodic full read
            # of every job when it is due (SlurmBackend.between_rounds).
            if listed is not None and listed.full_read_due():
                t = time.perf_counter()
                daemon.loop.between_rounds()
                print(f"       between rounds: the full read, {time.perf_counter() - t:.2f} s")
        daemon.store.release()
        if args.alone:
            fmt = backend.inner.transport.cli_format
            alone(env, [fmt.jobs_argv(), fmt.nodes_argv()], cfg.checkpoint.signal, ctld)
        totals = [t for t, _ in rows]
        print(f"median round {statistics.median(totals):.3f} s, max {max(totals):.3f} s, "
              f"commands per round median {statistics.median(c for _, c in rows)}; "
              f"load average {os.getloadavg()[0]:.1f}")  # fmt: skip
    finally:
        if not args.keep:
            localcluster.down(run)
            # its state, logs and the daemon's state dir (~60 MB at 5,000 jobs)
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
