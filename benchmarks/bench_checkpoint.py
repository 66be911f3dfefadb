"""Time and memory of saving and loading one checkpoint of a large state.

    python benchmarks/bench_checkpoint.py [--gib 1.0] [--dir DIR] [--json]

Saves a state of ``--gib`` GiB (float32 tensors of 64 MiB each, as a model plus
optimizer state would be) with :func:`slurm_gavel.job.checkpoint.save_checkpoint`,
then loads it with :func:`load_latest` in a fresh process, and reports: seconds,
file size, and the peak RSS above the state itself (``ru_maxrss`` after minus
before: the copy the save or the load makes on top of the tensors). Each phase runs
in its own process so that ``ru_maxrss`` is that phase's peak. Writes to a temporary
folder under ``--dir`` (default: the system's temp folder), removed afterwards.
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CHUNK_ELEMS = 16 << 20  # 64 MiB of float32


def _rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _phase(phase: str, folder: Path, gib: float) -> dict[str, float]:
    import torch

    from slurm_gavel.job.checkpoint import load_latest, save_checkpoint

    torch.set_num_threads(1)
    if phase == "save":
        n = max(1, round(gib * (1 << 30) / (CHUNK_ELEMS * 4)))
        state = {f"t{i}": torch.rand(CHUNK_ELEMS) for i in range(n)}
        before = _rss_mib()
        t0 = time.perf_counter()
        path = save_checkpoint(folder, 1, {"model": state})
        seconds = time.perf_counter() - t0
        return {
            "seconds": seconds,
            "bytes": float(path.stat().st_size),
            "rss_before_mib": before,
            "rss_extra_mib": _rss_mib() - before,
        }
    before = _rss_mib()
    t0 = time.perf_counter()
    ckpt = load_latest(folder)
    seconds = time.perf_counter() - t0
    assert ckpt is not None and ckpt.step == 1
    state_mib = sum(t.numel() * 4 for t in ckpt.state["model"].values()) / (1 << 20)
    return {
        "seconds": seconds,
        "rss_before_mib": before,
        "rss_extra_mib": _rss_mib() - before - state_mib,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--gib", type=float, default=1.0)
    p.add_argument("--dir", type=Path, default=None)
    p.add_argument("--json", action="store_true")
    p.add_argument("--phase", choices=["save", "load"], help=argparse.SUPPRESS)
    p.add_argument("--folder", type=Path, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.phase:
        print(json.dumps(_phase(args.phase, args.folder, args.gib)))
        return 0
    work = Path(tempfile.mkdtemp(dir=args.dir, prefix="bench-checkpoint-"))
    try:
        folder = work / "ck"
        out = {}
        for phase in ("save", "load"):
            cmd = [sys.executable, __file__, "--phase", phase, "--folder", str(folder)]
            res = subprocess.run(
                [*cmd, "--gib", str(args.gib)],
                capture_output=True,
                text=True,
                check=True,
            )
            out[phase] = json.loads(res.stdout)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if args.json:
        print(json.dumps(out, indent=1))
    else:
        size = out["save"]["bytes"] / (1 << 30)
        for phase in ("save", "load"):
            r = out[phase]
            print(
                f"{phase}: {r['seconds']:.2f} s, {size / r['seconds']:.2f} GiB/s, "
                f"peak RSS above the state {r['rss_extra_mib']:.0f} MiB"
            )
        print(f"file: {out['save']['bytes'] / (1 << 20):.0f} MiB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
