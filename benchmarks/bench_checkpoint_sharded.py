"""Time and memory of a sharded checkpoint (torch.distributed.checkpoint), 2 ranks on CPU.

    python benchmarks/bench_checkpoint_sharded.py [--gib 1.0] [--ranks 2] [--dir DIR] [--json]

A model of ``--gib`` GiB (Linear(4096, 4096) layers, 64 MiB of float32 weights each)
is sharded across ``--ranks`` gloo ranks with FSDP2 (``fully_shard``), so each rank
holds 1/ranks of it. Save: ``GavelJob(model, sharded=True).checkpoint()`` (every rank
writes its shard, hashes its share, rank 0 writes the marker and renames); load: a
fresh set of ranks resumes with ``GavelJob.resume()`` (every rank checks the directory
and hashes its share, then DCP loads). Each phase runs in fresh processes so that
``ru_maxrss`` is that phase's peak; reported per rank: seconds of the collective call
and the peak RSS above the rank's shard. Writes under ``--dir`` (default: the system's
temp folder), removed afterwards. Compare with bench_checkpoint.py (rank 0 saves one
file).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

WIDTH = 4096  # one Linear(4096, 4096) weight: 64 MiB of float32


def _rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _rank(phase: str, folder: Path, gib: float, rank: int, world: int, port: int) -> dict[str, Any]:
    import torch
    import torch.distributed as dist
    from torch import nn
    from torch.distributed.fsdp import fully_shard

    from slurm_gavel.job import GavelJob

    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    layers = max(1, round(gib * (1 << 30) / (WIDTH * WIDTH * 4)))
    torch.manual_seed(0 if phase == "save" else 1)  # the load must overwrite all of it
    with torch.device("meta"):  # no full copy of the model on any rank
        model = nn.Sequential(*[nn.Linear(WIDTH, WIDTH, bias=False) for _ in range(layers)])
    for layer in model:
        fully_shard(layer)
    fully_shard(model)
    model.to_empty(device="cpu")
    shards = [p.to_local() for p in model.parameters()]  # type: ignore[attr-defined]
    for shard in shards:
        torch.nn.init.uniform_(shard)
    local = sum(shard.numel() * 4 for shard in shards)
    env = {"SLURM_JOB_ID": "1", "SLURM_RESTART_COUNT": "1" if phase == "load" else "0"}
    job = GavelJob(model, sharded=True, checkpoint_dir=folder, env=env, enabled=True)
    dist.barrier()
    before = _rss_mib()
    t0 = time.perf_counter()
    if phase == "save":
        job.step = 1
        job.checkpoint()
    else:
        assert job.resume() == 1
    seconds = time.perf_counter() - t0
    extra = _rss_mib() - before
    after = [p.to_local() for p in model.parameters()]  # type: ignore[attr-defined]
    digest = float(sum(shard.detach().double().sum() for shard in after))
    dist.barrier()
    dist.destroy_process_group()
    return {
        "seconds": seconds,
        "rss_before_mib": before,
        "rss_extra_mib": extra,
        "shard_mib": local / (1 << 20),
        "checksum": digest,
    }


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _phase(phase: str, folder: Path, gib: float, world: int) -> list[dict[str, Any]]:
    port = _port()
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                __file__,
                "--phase",
                phase,
                "--folder",
                str(folder),
                "--gib",
                str(gib),
                "--ranks",
                str(world),
                "--rank",
                str(r),
                "--port",
                str(port),
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        for r in range(world)
    ]
    outs = [p.communicate()[0] for p in procs]
    if any(p.returncode for p in procs):
        raise SystemExit(f"{phase} failed: exit codes {[p.returncode for p in procs]}")
    return [json.loads(o) for o in outs]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--gib", type=float, default=1.0)
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--dir", type=Path, default=None)
    p.add_argument("--json", action="store_true")
    p.add_argument("--phase", choices=["save", "load"], help=argparse.SUPPRESS)
    p.add_argument("--folder", type=Path, help=argparse.SUPPRESS)
    p.add_argument("--rank", type=int, help=argparse.SUPPRESS)
    p.add_argument("--port", type=int, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.phase:
        res = _rank(args.phase, args.folder, args.gib, args.rank, args.ranks, args.port)
        print(json.dumps(res))
        return 0
    work = Path(tempfile.mkdtemp(dir=args.dir, prefix="bench-dcp-"))
    try:
        folder = work / "ck"
        out: dict[str, Any] = {}
        for phase in ("save", "load"):
            out[phase] = _phase(phase, folder, args.gib, args.ranks)
        (step_dir,) = folder.iterdir()
        out["files"] = {f.name: f.stat().st_size for f in sorted(step_dir.iterdir())}
    finally:
        shutil.rmtree(work, ignore_errors=True)
    saved = [r["checksum"] for r in out["save"]]
    loaded = [r["checksum"] for r in out["load"]]
    out["identical"] = saved == loaded
    if args.json:
        print(json.dumps(out, indent=1))
        return 0 if out["identical"] else 1
    total = sum(out["files"].values())
    for phase in ("save", "load"):
        secs = max(r["seconds"] for r in out[phase])
        extra = ", ".join(f"{r['rss_extra_mib']:.0f}" for r in out[phase])
        print(
            f"{phase}: {secs:.2f} s ({total / (1 << 30) / secs:.2f} GiB/s), "
            f"peak RSS above the shard per rank: {extra} MiB"
        )
    print(f"directory: {total / (1 << 20):.0f} MiB in {len(out['files'])} files: {out['files']}")
    print(f"loaded shards identical to the saved ones: {out['identical']}")
    return 0 if out["identical"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
