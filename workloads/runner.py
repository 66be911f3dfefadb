"""The reference workloads by job type: the throughput table's job type -> model family
and batch size (the families are in the model modules, their training loop in
workloads/trainer.py), and ``python -m workloads --job-type ...``.
"""

from __future__ import annotations

import re
import time
from typing import Any

import torch

from workloads import a3c, cyclegan, lm, recommendation, resnet18, resnet50, transformer
from workloads.trainer import (
    Family,
    Trainer,
    build_trainer,
    device_sync,
    parser,
    pick_device,
    print_summary,
    train,
    train_args,
)


def families() -> dict[str, Family]:
    fams = [m.FAMILY for m in (resnet18, resnet50, transformer, lm, recommendation, cyclegan, a3c)]
    return {f.name: f for f in fams}


_TYPE = re.compile(r"^(?P<name>.+?) \(batch size (?P<bs>\d+)\)$")


def resolve(job_type: str) -> tuple[Family, int]:
    """(family, batch size) for a job type of the throughput table."""
    fams = families()
    for fam in fams.values():
        if fam.fixed_type == job_type:
            return fam, fam.default_batch
    m = _TYPE.match(job_type)
    if m and m.group("name") in fams and int(m.group("bs")) in fams[m.group("name")].batch_sizes:
        return fams[m.group("name")], int(m.group("bs"))
    known = [t for f in fams.values() for t in f.job_types()]
    raise SystemExit(f"unknown job type {job_type!r}; known: {', '.join(known)}")


def build(job_type: str, *, tiny: bool, device: torch.device, seed: int = 0) -> Trainer:
    family, batch_size = resolve(job_type)
    return build_trainer(family, batch_size, tiny=tiny, device=device, seed=seed)


def run(job_type: str, steps: int, **options: Any) -> dict[str, Any]:
    """trainer.train() for a job type of the throughput table."""
    family, batch_size = resolve(job_type)
    return train(family, batch_size, steps, **options)


def measure(
    job_type: str,
    seconds: float,
    *,
    tiny: bool = False,
    device: str = "auto",
    warmup: int = 2,
    min_steps: int = 3,
) -> tuple[float, int]:
    """(steps/s, steps timed) over a window of about ``seconds`` after ``warmup`` steps."""
    dev = pick_device(device)
    trainer = build(job_type, tiny=tiny, device=dev)
    sync = device_sync(dev)
    for _ in range(warmup):
        trainer.step()
    sync()
    t0 = time.perf_counter()
    n = 0
    while n < min_steps or time.perf_counter() - t0 < seconds:
        trainer.step()
        n += 1
        if n % 4 == 0:
            sync()
    sync()
    return n / (time.perf_counter() - t0), n


def main(argv: list[str] | None = None) -> int:
    args = parser("python -m workloads").parse_args(argv)
    family, batch_size = resolve(args.job_type)
    return print_summary(train_args(args, family, batch_size))
