"""One measurement process of `slurm-gavel profile` (run by slurm_gavel.profiling.profiler).

    python -m slurm_gavel.profiling.worker --job-type T --seconds S --device D
           [--tiny] [--sync-dir DIR --slot I] [--rank R --world N --master-port P]

Warms up, then (with --sync-dir) writes ``ready-<slot>`` and waits for ``go`` so that
co-located workers measure over the same window, then trains for S seconds and prints
one JSON line ``{"steps_per_s": ..., "steps": ...}``. With --world N > 1 it is rank R of
a data-parallel job: gradients are all-reduced after every backward (gloo on CPU, nccl
on GPUs), which is what a job of scale factor N does per step.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path


def _data_parallel(trainer: object, world: int) -> None:
    """All-reduce (average) each gradient as soon as it is accumulated."""
    import torch
    import torch.distributed as dist

    def hook(p: torch.Tensor) -> None:
        if p.grad is not None:
            dist.all_reduce(p.grad)
            p.grad /= world

    for obj in trainer.state.values():  # type: ignore[attr-defined]
        if isinstance(obj, torch.nn.Module):
            for p in obj.parameters():
                if p.requires_grad:
                    p.register_post_accumulate_grad_hook(hook)


def _go_on(mine: bool, world: int) -> bool:
    """Whether to take another step: with several ranks, one answer for all (any rank
    that wants more steps keeps every rank going). Each rank's own clock decided alone
    before, so under load one rank could start a step (and its gradient all-reduce)
    after its peer had left the group: gloo aborted it (a CI failure on 22.05)."""
    if world <= 1:
        return mine
    import torch
    import torch.distributed as dist

    flag = torch.tensor([1 if mine else 0])
    dist.all_reduce(flag, op=dist.ReduceOp.MAX)
    return bool(flag.item())


def _wait_go(sync: Path, slot: int, timeout: float = 600.0) -> None:
    (sync / f"ready-{slot}").touch()
    deadline = time.monotonic() + timeout
    while not (sync / "go").exists():
        if time.monotonic() > deadline:
            raise SystemExit("profiler_worker: no 'go' from the profiler")
        time.sleep(0.01)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m slurm_gavel.profiling.worker")
    p.add_argument("--job-type", required=True)
    p.add_argument("--seconds", type=float, required=True)
    p.add_argument("--device", default="auto")
    p.add_argument("--tiny", action="store_true")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--sync-dir", type=Path)
    p.add_argument("--slot", type=int, default=0)
    p.add_argument("--rank", type=int, default=0)
    p.add_argument("--world", type=int, default=1)
    p.add_argument("--master-port", type=int, default=29500)
    args = p.parse_args(argv)

    import torch

    from workloads import runner

    device = runner.pick_device(args.device)
    if args.world > 1:
        import torch.distributed as dist

        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ["MASTER_PORT"] = str(args.master_port)
        if device.type == "cuda":
            device = torch.device(f"cuda:{args.rank}")
            torch.cuda.set_device(device)
        dist.init_process_group(
            "nccl" if device.type == "cuda" else "gloo", rank=args.rank, world_size=args.world
        )
    trainer = runner.build(args.job_type, tiny=args.tiny, device=device, seed=args.rank)
    if args.world > 1:
        _data_parallel(trainer, args.world)
    sync = runner.device_sync(device)
    for _ in range(args.warmup):
        trainer.step()
    sync()
    if args.sync_dir is not None:
        _wait_go(args.sync_dir, args.slot)
    t0 = time.perf_counter()
    steps = 0
    while _go_on(steps < 3 or time.perf_counter() - t0 < args.seconds, args.world):
        trainer.step()
        steps += 1
    sync()
    rate = steps / (time.perf_counter() - t0)
    json.dump({"steps_per_s": rate, "steps": steps}, sys.stdout)
    sys.stdout.write("\n")
    if args.world > 1:
        _leave_group()
    return 0


def _leave_group() -> None:
    """Leave the data-parallel group without gloo aborting the process on the way out.

    Under load one rank could leave while its peer's gloo threads were still tearing the
    pair down, and the process died in C++ ('terminate called without an active
    exception', exit 134) after printing its measurement (reproduced: 2 of 40 rank pairs
    with both cores busy; a CI failure on 22.05). Both ranks now wait for each other
    before the group is destroyed, and the process ends without running the C++
    destructors of the interpreter's teardown: the measurement is written and flushed."""
    import torch.distributed as dist

    sys.stdout.flush()
    sys.stderr.flush()
    dist.barrier()
    dist.destroy_process_group()
    os._exit(0)


if __name__ == "__main__":
    raise SystemExit(main())
