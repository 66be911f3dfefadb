"""The engine of the reference workloads: a :class:`Family` of models and its training
loop under :class:`slurm_gavel.job.GavelJob` (checkpoint on SIGUSR1, exit 99, resume
after a requeue), and the command line of ``python -m workloads.<family>``.

The model modules import this one; workloads/runner.py lists them and resolves a
throughput table's job type to (family, batch size).

Reproducibility: all random numbers (weights, synthetic batches, dropout) come from the
global torch RNG seeded here, and deterministic algorithms are on, so a run resumed from
a checkpoint reaches bit-identical parameters to an uninterrupted one (on CPU).

Synthetic batches are drawn on the device the model runs on (the CPU's generator on the
CPU, the GPU's on a GPU; both seeded here), never on the CPU and copied: on an H200 the
Recommendation workload drew its 512 x 27,278 ratings on the CPU at 4.5 steps/s, and on
the GPU at 306 steps/s, so a profile measured the host's random numbers, not the GPU
(benchmarks/README.md, "The throughput table on a real GPU"). A3C keeps its observations
on the CPU: its environment steps run there in Gavel's workload too.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from slurm_gavel.errors import InputError
from slurm_gavel.job import GavelJob
from workloads import emulate, emulate_pairs


@dataclass
class Trainer:
    """What one training step needs; ``state`` is what a checkpoint saves."""

    step: Callable[[], float]  # trains on one batch, returns the loss
    state: dict[str, Any]  # name -> module/optimizer (anything with state_dict)

    @classmethod
    def of(
        cls,
        model: nn.Module,
        opt: torch.optim.Optimizer,
        loss_of: Callable[[], torch.Tensor],
        clip: float | None = None,
    ) -> Trainer:
        """One model, one optimizer: a step draws its batch and computes the loss
        (loss_of), then backward, optional gradient-norm clipping, an optimizer step."""

        def step() -> float:
            opt.zero_grad(set_to_none=True)
            loss = loss_of()
            loss.backward()
            if clip is not None:
                nn.utils.clip_grad_norm_(model.parameters(), clip)
            opt.step()
            return float(loss.item())

        return cls(step=step, state={"model": model, "optimizer": opt})

    def parameters_vector(self) -> torch.Tensor:
        """All module parameters flattened (tests compare runs with it)."""
        parts = [
            p.detach().reshape(-1)
            for obj in self.state.values()
            if isinstance(obj, nn.Module)
            for p in obj.parameters()
        ]
        return torch.cat(parts)


@dataclass(frozen=True)
class Family:
    name: str  # "ResNet-50"
    batch_sizes: tuple[int, ...]  # those of the throughput table
    build: Callable[[int, bool, torch.device], Trainer]
    fixed_type: str | None = None  # job type without a batch size (A3C, CycleGAN)
    default_batch: int = 1
    aliases: tuple[str, ...] = field(default=())

    def job_types(self) -> list[str]:
        return [self.job_type(b) for b in self.batch_sizes]

    def job_type(self, batch_size: int) -> str:
        """The throughput table's job type, "ResNet-50 (batch size 64)" or "A3C"."""
        return self.fixed_type or f"{self.name} (batch size {batch_size})"


def setup_determinism(seed: int) -> None:
    torch.manual_seed(seed)
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.benchmark = False


def pick_device(name: str) -> torch.device:
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    return torch.device(name)


def device_sync(device: torch.device) -> Callable[[], None]:
    """Waits for the device's queued work (GPU kernels run asynchronously), so a clock
    read after it times the work; a no-op on the CPU."""

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize()

    return sync


def build_trainer(
    family: Family, batch_size: int, *, tiny: bool, device: torch.device, seed: int = 0
) -> Trainer:
    setup_determinism(seed)
    return family.build(batch_size, tiny, device)


def train(
    family: Family,
    batch_size: int,
    steps: int,
    *,
    tiny: bool = False,
    device: str = "auto",
    seed: int = 0,
    checkpoint_every: int | None = None,
    enabled: bool | None = None,
    min_step_seconds: float = 0.0,
    emulate_speed: float | None = None,
) -> dict[str, Any]:
    """Train ``steps`` steps under GavelJob; returns a summary (also printed as JSON).

    ``min_step_seconds`` paces the loop (each step lasts at least that long): on the
    local test cluster's fake GPUs it stands in for a slower device and keeps tiny
    jobs running long enough to be preempted.

    ``emulate_speed`` (a factor, see workloads/emulate.py) paces the steps to Gavel's
    published steps/s for this job type on the node's GPU type, times the factor.
    """
    job_type = family.job_type(batch_size)
    pacer, watch = _pacer(job_type, emulate_speed)
    trainer = build_trainer(family, batch_size, tiny=tiny, device=pick_device(device), seed=seed)
    loss = float("nan")
    with GavelJob(enabled=enabled, checkpoint_every=checkpoint_every, **trainer.state) as job:
        start = job.step
        t0 = time.perf_counter()
        if pacer is not None:
            pacer.begin()
            emulate_pairs.follow(watch, pacer, job.progress)
        for _ in job.steps(steps):
            began = time.perf_counter()
            loss = trainer.step()
            left = min_step_seconds - (time.perf_counter() - began)
            if left > 0:
                time.sleep(left)
            if pacer is not None:
                pacer.step_done()
                emulate_pairs.follow(watch, pacer, job.progress)
        wall = time.perf_counter() - t0
        if watch is not None:
            watch.finish()
    extra = (
        {}
        if pacer is None
        else {
            "emulated_steps_per_s": round(pacer.rate, 4),
            "emulation_behind_s": round(pacer.behind_s, 3),
            **({} if watch is None else {"emulated_paired_s": round(watch.paired_s, 1)}),
        }
    )
    return {
        "job_type": job_type,
        "start_step": start,
        "steps": job.step,
        "loss": loss,
        "wall_s": round(wall, 3),
        "steps_per_s": job.progress.steps_per_s(),
        "param_checksum": float(trainer.parameters_vector().double().sum()),
        **extra,
    }


def _pacer(
    job_type: str, factor_cli: float | None
) -> tuple[emulate.Pacer | None, emulate_pairs.PairWatch | None]:
    """The emulated-speed pacer (and one line saying so) and, in a Slurm job, what
    watches for a GPU partner; (None, None) when not asked for."""
    env = os.environ
    try:
        factor = emulate.factor_from(factor_cli, env)
        if factor is None:
            return None, None
        scale = emulate.run_scale(env)  # a moldable job: the GPUs of this run
        emu = emulate.emulation_for(job_type, scale, factor)
        watch = emulate_pairs.watch_for(job_type, scale, emu.gpu_type, factor, emu.rate, env)
    except (ValueError, InputError) as e:
        raise SystemExit(f"--emulate-gpu-speed: {e}") from None
    print(
        emu.describe(
            job_type,
            os.environ.get("SLURMD_NODENAME", "-"),
            os.environ.get("SLURM_RESTART_COUNT", "0"),
        ),
        flush=True,
    )
    return emulate.Pacer(emu.rate), watch


def parser(prog: str, family: Family | None = None) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=prog,
        description="slurm-gavel reference workload (synthetic data) with checkpoint/resume.",
    )
    if family is None:
        p.add_argument("--job-type", required=True, help='e.g. "ResNet-50 (batch size 64)"')
    elif not family.fixed_type:
        p.add_argument("--batch-size", type=int, required=True, choices=family.batch_sizes)
    p.add_argument("--steps", type=int, required=True, help="total training steps")
    p.add_argument("--tiny", action="store_true", help="a small model that trains fast on CPU")
    p.add_argument("--device", default="auto", help="auto (default), cpu, cuda, cuda:1")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--checkpoint-every",
        type=int,
        default=None,
        metavar="N",
        help="also checkpoint every N steps (default: only on the signal)",
    )
    p.add_argument(
        "--min-step-seconds",
        type=float,
        default=0.0,
        metavar="S",
        help="make each step last at least S seconds (emulates a slower device)",
    )
    p.add_argument(
        "--emulate-gpu-speed",
        type=float,
        default=None,
        metavar="FACTOR",
        help="pace steps to Gavel's published steps/s for this job type on the "
        "node's GPU type, times FACTOR (for fake GPUs; default: env "
        f"{emulate.ENV_SPEED}, else off)",
    )
    return p


def main(argv: list[str] | None = None, *, family: Family) -> int:
    """`python -m workloads.<family>`: the family's command line (workloads/runner.py
    has the one that takes --job-type)."""
    args = parser(f"python -m workloads.{family.name}", family).parse_args(argv)
    batch_size = family.default_batch if family.fixed_type else args.batch_size
    return print_summary(train_args(args, family, batch_size))


def train_args(args: argparse.Namespace, family: Family, batch_size: int) -> dict[str, Any]:
    """train() with the options of parser()."""
    return train(
        family,
        batch_size,
        args.steps,
        tiny=args.tiny,
        device=args.device,
        seed=args.seed,
        checkpoint_every=args.checkpoint_every,
        min_step_seconds=args.min_step_seconds,
        emulate_speed=args.emulate_gpu_speed,
    )


def print_summary(summary: dict[str, Any]) -> int:
    json.dump(summary, sys.stdout)
    sys.stdout.write("\n")
    return 0
