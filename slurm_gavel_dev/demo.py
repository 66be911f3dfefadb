"""The demo (`bash tools/demo`): gavel against Slurm alone on a real local Slurm cluster.

1. start tools/local-cluster with three GPU types and the SPANK plugin, in a private
   run dir on free ports;
2. submit a mixed set of the reference workloads (tiny models on the CPU) with
   ``sbatch --gavel-job-type=...``; run ``slurm-gavel run`` with short rounds and show
   one progress line per round until every job has completed;
3. submit the same jobs as plain Slurm jobs (no gavel type, ``--gpus=1`` of any type)
   and let Slurm's FIFO+backfill place them, type-blind;
4. print per job its type, the GPU types it ran on, its restarts and its JCT under
   both; stop the daemon and the cluster (also on Ctrl-C or failure).

The GPUs are fake, so each job paces its steps to the steps/s Gavel *published* for
its type on its node's GPU type (workloads/emulate.py, ``GAVEL_EMULATE_SPEED``).
``--simulate`` instead replays the shipped example trace in the simulator. With a
packed policy (``--policy max_min_fairness_packed``) the cluster has GPU shards and
the jobs also run under the unpacked policy; slurm_gavel_dev/demo_packed.py.
The command line is demo_options.py's, the Slurm commands demo_slurm.py's, the pure
parts (job set, config, tables) demo_report.py's.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from slurm_gavel_dev import demo_packed as packed
from slurm_gavel_dev import demo_report as rep
from slurm_gavel_dev import processes
from slurm_gavel_dev.demo_options import parse_args
from slurm_gavel_dev.demo_report import DemoJob, Outcome
from slurm_gavel_dev.demo_slurm import FINISHED, REPO, DemoSlurm, daemon_round, say

PLUGIN = REPO / "spank" / "build" / "slurm-gavel.so"


class Demo:
    def __init__(self, args: argparse.Namespace, jobs: list[DemoJob]) -> None:
        self.args = args
        self.jobs = jobs
        self.run_dir: Path = args.dir.resolve()
        self.env = {**os.environ, "SLURM_CONF": str(self.run_dir / "slurm.conf")}
        self.slurm = DemoSlurm(self.env)
        self.daemon: subprocess.Popen[bytes] | None = None

    # ---- the phases ------------------------------------------------------------------

    def start_cluster(self) -> None:
        from slurm_gavel_dev import localcluster
        from slurm_gavel_dev.localcluster_conf import ClusterSpec

        if not PLUGIN.exists():
            subprocess.run(
                ["make", "-C", str(REPO / "spank")], check=True, stdout=subprocess.DEVNULL
            )
        say(
            f"[demo] starting a local Slurm cluster ({self.args.topology}: one slurmd per "
            f"node, fake GPU devices with typed GRES) in {self.run_dir}"
        )
        spec = ClusterSpec(
            topology=self.args.topology,
            partitions="shared",
            spank=[f"optional {PLUGIN}"],
            shards=packed.SHARDS_PER_GPU if packed.packs(self.args.policy) else 0,
        )
        localcluster.up(spec, self.run_dir, port_base_auto=True)

    def submit_all(self, phase: str) -> tuple[list[str], list[float]]:
        base = self.run_dir / phase
        for sub in ("out", "ckpt", "progress", "scripts"):
            (base / sub).mkdir(parents=True, exist_ok=True)
        # One thread per job: a tiny model gains nothing from more, and the demo's jobs
        # share a couple of cores.
        env = {
            **self.env,
            "GAVEL_EMULATE_SPEED": f"{self.args.speed:g}",
            "OMP_NUM_THREADS": "1",
            "MKL_NUM_THREADS": "1",
        }
        ids, times = [], []
        for j in self.jobs:
            script = REPO / "workloads" / "sbatch" / f"{j.script}.sbatch"
            common = ["-p", "gpu", "-J", f"demo-{j.label}", "-o", str(base / "out" / "%j.out")]
            if phase != "slurm":
                mold = [f"--gavel-scale={self.args.moldable}"] if self.args.moldable else []
                argv = [
                    *common,
                    f"--gavel-job-type={j.job_type}",
                    f"--gavel-steps={j.steps}",
                    f"--gavel-checkpoint-dir={base / 'ckpt'}",
                    *mold,
                    str(script),
                ]
                jenv = {
                    **env,
                    "GAVEL_PROGRESS_DIR": str(base / "progress"),
                    "GAVEL_PROGRESS_INTERVAL": "2",
                }
            else:  # the same script without its #SBATCH --gavel-* lines: a plain job
                plain = base / "scripts" / script.name
                plain.write_text(rep.baseline_script(script.read_text()))
                argv = [*common, str(plain)]
                jenv = {
                    **env,
                    "GAVEL_JOB_TYPE": j.job_type,
                    "GAVEL_TOTAL_STEPS": str(j.steps),
                    "GAVEL_CHECKPOINT_DIR": str(base / "ckpt"),
                }
            ids.append(self.slurm.sbatch([*argv, "--tiny", "--device", "cpu"], jenv))
            times.append(time.time())
        return ids, times

    def start_daemon(self, phase: str, policy: str) -> Path:
        from slurm_gavel.domain.throughputs import load_table

        base = self.run_dir / phase
        table = base / "table.json"
        table.write_text(json.dumps(rep.scaled_table(load_table().to_json(), self.args.speed)))
        cfg = base / "gavel.yaml"
        cfg.write_text(
            rep.daemon_config(
                policy=policy,
                round_seconds=self.args.round_seconds,
                state_dir=str(base / "state"),
                progress_dir=str(base / "progress"),
                table=str(table),
                grace_seconds=min(15.0, self.args.round_seconds / 2),
                stay_credit_seconds=self.args.stay_credit,
                restart_aware=self.args.restart_aware,
            )
        )
        with open(base / "daemon.log", "ab") as log:
            self.daemon = subprocess.Popen(
                [sys.executable, "-m", "slurm_gavel", "run", "--config", str(cfg)],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=self.env,
            )
        say(
            f"[demo] slurm-gavel run --config {cfg} (policy {policy}, "
            f"{self.args.round_seconds:g} s rounds"
            + (f", stay credit {self.args.stay_credit:g} s" if self.args.stay_credit else "")
            + (", restart-aware" if self.args.restart_aware else "")
            + f"; log {base / 'daemon.log'})"
        )
        return base / "state" / "state.json"

    def stop_daemon(self) -> None:
        p, self.daemon = self.daemon, None
        if p is not None:
            processes.stop(p)

    def wait(
        self, phase: str, ids: list[str], times: list[float], state_file: Path | None
    ) -> list[Outcome]:
        """Poll until every job finished; one progress line per daemon round (per
        ``round_seconds`` for Slurm alone). Returns the outcomes in job order."""
        labels = {i: j.label for i, j in zip(ids, self.jobs, strict=True)}
        seen_end: dict[str, float] = {}
        t0, last_round, next_line = min(times), -1, 0.0
        deadline = time.monotonic() + self.args.timeout
        while True:
            q = self.slurm.squeue(ids)
            if q is None:
                time.sleep(1.0)
                continue
            now = time.time()
            for j, (state, _) in q.items():
                if state in FINISHED:
                    seen_end.setdefault(j, now)
            # Where each job runs: the daemon's placement of the round (jobs it just
            # placed are still starting); for Slurm alone, the node squeue shows.
            placed = {
                j: node.split("-")[0] for j, (st, node) in q.items() if st == "RUNNING" and node
            }
            counts: dict[str, int] = {}
            if state_file is not None:  # one line per daemon round
                rnd, placed, counts = daemon_round(state_file)
                show = rnd is not None and rnd != last_round
            else:  # Slurm alone: one line per round_seconds
                rnd = int((now - t0) // self.args.round_seconds)
                show = time.monotonic() >= next_line
                if show:
                    next_line = time.monotonic() + self.args.round_seconds
            if show and rnd is not None:
                last_round = rnd
                say(
                    f"  {phase:<6} "
                    + rep.progress_line(
                        rnd, now - t0, {j: s for j, (s, _) in q.items()}, placed, labels, counts
                    )
                )
            if all(s in FINISHED for s, _ in q.values()):
                break
            if self.daemon is not None and self.daemon.poll() is not None:
                raise RuntimeError(
                    f"the daemon exited ({self.daemon.returncode}); see "
                    f"{self.run_dir / phase / 'daemon.log'}"
                )
            if time.monotonic() > deadline:
                say(
                    f"[demo] {phase}: not all jobs done after {self.args.timeout:.0f} s; "
                    "cancelling the rest"
                )
                self.slurm.cmd("scancel", *ids, check=False)
                time.sleep(2)
                break
            time.sleep(1.0)
        out = self.run_dir / phase / "out"
        return [
            self.slurm.outcome(j, t, seen_end.get(j), out / f"{j}.out")
            for j, t in zip(ids, times, strict=True)
        ]

    def gavel_phase(self, phase: str, policy: str) -> tuple[list[Outcome], list[float]]:
        """Submit the jobs, run the daemon with `policy` until all are done."""
        ids, times = self.submit_all(phase)
        state_file = self.start_daemon(phase, policy)
        outcomes = self.wait(phase, ids, times, state_file)
        self.stop_daemon()
        self.slurm.wait_idle()
        return outcomes, times

    def predict(self, times: list[float], policies: list[str]) -> dict[str, float] | None:
        """The simulator's average JCT for the same jobs, cluster, rounds and table."""
        base = self.run_dir / "simulator"
        base.mkdir(exist_ok=True)
        (base / "trace.csv").write_text(packed.trace_csv(self.jobs, times))
        try:
            got = packed.predict(
                base / "trace.csv",
                self.run_dir / "gavel" / "table.json",
                self.args.topology,
                [*policies, "slurm_fifo"],
                self.args.round_seconds,
                base / "summary.json",
            )
        except (subprocess.SubprocessError, OSError, ValueError, KeyError) as e:
            say(f"[demo] the simulator's prediction failed: {e}")
            return None
        say(
            f"[demo] simulator, same jobs and cluster ({packed.PREDICT_OVERHEAD_S:g} s per "
            f"restart assumed): " + ", ".join(f"{p} {v:.0f} s" for p, v in got.items())
        )
        return got

    def run(self) -> int:
        a = self.args
        say(
            f"[demo] {len(self.jobs)} jobs: "
            + ", ".join(f"{j.label}={j.job_type} x{j.steps}" for j in self.jobs)
        )
        say(
            f"[demo] note: the GPUs are fake; each job paces its steps to the steps/s "
            f"Gavel published for its type on its node's GPU type, x {a.speed:g} "
            "(workloads/emulate.py). Speeds are emulated, not measured."
        )
        self.start_cluster()
        say(
            "[demo] phase 1: gavel. sbatch --gavel-job-type=... (held on arrival), then "
            "the daemon places, preempts and moves them each round"
        )
        gavel, times = self.gavel_phase("gavel", a.policy)
        unpacked: list[Outcome] | None = None
        if a.compare_policy:
            say(
                f"[demo] phase 1b: gavel with {a.compare_policy} (no GPU sharing): the same "
                "jobs, for comparison"
            )
            unpacked, _ = self.gavel_phase("unpacked", a.compare_policy)
        slurm: list[Outcome] | None = None
        if not a.no_baseline:
            say(
                "[demo] phase 2: Slurm alone. The same jobs without a gavel type "
                "(--gpus=1 of any type): Slurm's FIFO+backfill places them, type-blind"
            )
            ids, times = self.submit_all("slurm")
            slurm = self.wait("slurm", ids, times, None)
        predicted = self.predict(times, [a.policy, a.compare_policy]) if unpacked else None
        say()
        if unpacked is not None and a.compare_policy:
            say(
                packed.final_table(
                    self.jobs, gavel, unpacked, slurm, a.policy, a.compare_policy, predicted
                )
            )
        else:
            say(rep.final_table(self.jobs, gavel, slurm, a.policy))
        say(
            "(JCT: seconds from submission to completion; GPU speeds emulated from Gavel's "
            "published table, the GPUs are fake)"
        )
        results = {
            "policy": a.policy,
            "stay_credit_seconds": a.stay_credit,
            "speed": a.speed,
            "topology": a.topology,
            **rep.results_json(self.jobs, gavel, slurm),
        }
        if unpacked is not None:
            results["compare_policy"] = a.compare_policy
            results["simulator_avg_jct_s"] = predicted
            results.update(packed.results_json(self.jobs, unpacked, gavel))
        (self.run_dir / "results.json").write_text(json.dumps(results, indent=1))
        ok = all(o.state == "COMPLETED" for o in [*gavel, *(unpacked or []), *(slurm or [])])
        return 0 if ok else 1


def simulate(args: argparse.Namespace) -> int:
    """The simulator-only form: the shipped example trace, side by side, with plots."""
    plots = (args.plots or args.dir / "plots").resolve()
    cmd = [
        sys.executable,
        "-m",
        "slurm_gavel",
        "simulate",
        "--no-progress",
        "--trace",
        str(REPO / "conf" / "examples" / "trace.csv"),
        "--policy",
        "max_min_fairness",
        "--policy",
        "max_min_fairness_agnostic",
        "--policy",
        "slurm_fifo",
        "--plot",
        str(plots),
        "--json",
        str(plots / "summary.json"),
    ]
    plots.mkdir(parents=True, exist_ok=True)
    say("[demo] slurm-gavel simulate " + " ".join(cmd[4:]))
    rc = subprocess.run(cmd, cwd=REPO).returncode
    if rc == 0:
        say(f"[demo] plots and summary.json in {plots}")
    if rc != 0 or args.moldable is None:
        return rc
    # The same trace with moldable jobs (n/2..2n GPUs, chosen at each (re)start).
    mold = [*cmd[:7], "--policy", "max_min_fairness", "--moldable", "--json"]
    mold.append(str(plots / "summary-moldable.json"))
    say("[demo] slurm-gavel simulate " + " ".join(mold[4:]))
    rc = subprocess.run(mold, cwd=REPO).returncode
    if rc == 0:
        rigid = json.loads((plots / "summary.json").read_text())
        moldable = json.loads((plots / "summary-moldable.json").read_text())
        say(rep.moldable_comparison(rigid, moldable))
    return rc


def _stop(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.simulate:
        return simulate(args)
    try:
        jobs = rep.parse_jobs(args.jobs)
    except ValueError as e:
        print(f"tools/demo: {e}", file=sys.stderr)
        return 2
    demo = Demo(args, jobs)
    started = time.monotonic()
    previous = signal.signal(signal.SIGTERM, _stop)
    try:
        return demo.run()
    except KeyboardInterrupt:
        say("[demo] interrupted")
        return 130
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # let the clean-up finish
        demo.stop_daemon()
        from slurm_gavel_dev import localcluster

        localcluster.down(demo.run_dir)
        signal.signal(signal.SIGTERM, previous)
        say(
            f"[demo] stopped the daemon and the cluster; wall time "
            f"{time.monotonic() - started:.0f} s; files in {demo.run_dir}"
        )


if __name__ == "__main__":
    raise SystemExit(main())
