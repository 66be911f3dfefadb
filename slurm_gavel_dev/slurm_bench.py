"""Round latency of the CLI SlurmBackend on a real local cluster with many pending jobs.

    .venv/bin/python -m slurm_gavel_dev.slurm_bench --jobs 1000 [--repeat 5] [--slurm 24.11]

Starts a private local cluster (tools/local-cluster, free ports), submits N held
managed jobs, then times: observe (sinfo+squeue --json, parse, snapshot); act
that starts one job per free GPU; observe+act of an unchanged placement (lease
extension: no command); act placing ALL N jobs (N updates in one scontrol, one
release). Prints medians and the commands issued per action kind. Needs root and
Slurm (tools/setup).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from slurm_gavel.backends.slurm.backend import SlurmBackend
from slurm_gavel.backends.slurm.cli.transport import CliTransport, cli_backend
from slurm_gavel.domain.cluster_model import ActResult, JobPlacement, NodeSlice, RoundPlacement
from slurm_gavel_dev import localcluster
from slurm_gavel_dev.localcluster_conf import ClusterSpec

T = TypeVar("T")


def _submit(env: dict[str, str], n: int, workdir: Path, hold: list[str]) -> None:
    # One sbatch per job (arrays would appear as one pending record).
    for i in range(n):
        subprocess.run(
            [
                "sbatch",
                "--parsable",
                *hold,
                f"--comment=gavel:type=A3C,steps={i + 1}",
                "-p",
                "gpu",
                "-o",
                "/dev/null",
                "-D",
                str(workdir),
                "--wrap",
                "sleep 600",
            ],
            check=True,
            env=env,
            capture_output=True,
        )


def _one_gpu_each(round_index: int, jobs: list[str], gpus: list[tuple[str, str]]) -> RoundPlacement:
    """Job i on one GPU of gpus[i]'s node (node, GPU type), as far as there are GPUs."""
    return RoundPlacement(
        round_index,
        0,
        {j: JobPlacement(j, t, (NodeSlice(n, 1),)) for j, (n, t) in zip(jobs, gpus, strict=False)},
    )


def _act_counted(
    b: SlurmBackend[CliTransport], placement: RoundPlacement
) -> tuple[ActResult, float]:
    """One act, its commands counted and timed from zero; (result, seconds)."""
    b.transport.commands.counts.clear()
    b.transport.commands.seconds.clear()
    t = time.perf_counter()
    res = b.act(placement)
    return res, time.perf_counter() - t


def _timed(fn: Callable[[], T], repeat: int) -> tuple[float, T]:
    """Median wall seconds of ``repeat`` calls (at least one), and the last result."""
    times = []
    for _ in range(max(1, repeat)):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times), out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--jobs", type=int, default=1000)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--topology", default="v100:2x4,p100:2x4,k80:2x4")
    p.add_argument("--slurm", default="22.05", help="Slurm release (tools/local-cluster --slurm)")
    p.add_argument(
        "--no-lua",
        action="store_true",
        help="no job_submit.lua (jobs held with sbatch --hold): its cost per update",
    )
    args = p.parse_args(argv)
    run = Path(tempfile.mkdtemp(prefix="slurm-gavel-bench-"))
    run.chmod(0o755)  # 26.05's slurmctld runs as user slurm
    spec = ClusterSpec(topology=args.topology, hold_on_arrival=not args.no_lua, slurm=args.slurm)
    localcluster.up(spec, run, port_base_auto=True)
    env = localcluster.slurm_env(run)
    try:
        t = time.perf_counter()
        _submit(env, args.jobs, run, ["--hold"] if args.no_lua else [])
        print(f"submitted {args.jobs} held managed jobs in {time.perf_counter() - t:.1f}s")
        # SLURM_CONF, and a chroot release's client wrappers first on PATH
        b = cli_backend(env={"SLURM_CONF": env["SLURM_CONF"], "PATH": env["PATH"]})
        obs_s, snap = _timed(b.observe, args.repeat)
        print(
            f"observe ({len(snap.jobs)} managed jobs, {len(snap.nodes)} nodes): "
            f"median {obs_s * 1000:.0f} ms over {args.repeat}"
        )
        free = [(n.name, n.gpu_type) for n in snap.nodes for _ in range(n.usable_gpus)]
        jobs = [j.job.id for j in snap.jobs]
        commands = b.transport.commands
        first = _one_gpu_each(0, jobs, free)  # as many jobs as there are free GPUs
        res, act_s = _act_counted(b, first)
        print(
            f"act: start {len(res.started)} jobs: {act_s * 1000:.0f} ms, "
            f"commands {dict(commands.counts)}, failed {len(res.failed)}"
        )
        time.sleep(2)

        def keep_round() -> ActResult:
            b.observe()
            return b.act(first)

        commands.counts.clear()
        keep_s, res = _timed(keep_round, args.repeat)
        print(
            f"observe+act, unchanged placement ({len(res.kept)} kept): median "
            f"{keep_s * 1000:.0f} ms, commands/round "
            f"{ {k: v // args.repeat for k, v in commands.counts.items()} }"
        )
        # every job, the free GPUs taken round-robin (most jobs share one GPU's slot)
        everyone = _one_gpu_each(1, jobs, free * (len(jobs) // max(1, len(free)) + 1))
        b.observe()
        res, act_s = _act_counted(b, everyone)
        print(
            f"act: place all {len(everyone.jobs)} (started {len(res.started)}, kept "
            f"{len(res.kept)}): {act_s * 1000:.0f} ms, "
            f"commands {dict(commands.counts)}, seconds per kind "
            f"{ {k: round(v, 2) for k, v in commands.seconds.items()} }"
        )
    finally:
        localcluster.down(run)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
