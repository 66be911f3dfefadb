"""The steps every rank of the multi-rank test jobs runs (ddp_train.py, fsdp_train.py):
one start line per run in OUT_DIR/log-<rank>, then the steps, rank 0 writing each done
step to OUT_DIR/step. Imported from the job script's folder (its sys.path[0])."""

import os
import socket
import time
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn

from slurm_gavel.job import GavelJob


def run_steps(
    job: GavelJob,
    forward: Callable[[torch.Tensor], torch.Tensor],
    opt: torch.optim.Optimizer,
    out: Path,
    rank: int,
    total: int,
    batch: int,
    sleep_s: float,
) -> None:
    """Log this run's start, then train ``forward`` to sin(sum(x)) on random batches
    until ``total`` steps, sleeping ``sleep_s`` after each (room for the signal to land
    mid-run)."""
    node = os.environ.get("SLURMD_NODENAME", socket.gethostname())
    with open(out / f"log-{rank}", "a") as log:
        print(
            f"start rank={rank} restart={job.env.restart_count} step={job.step} node={node}",
            file=log,
            flush=True,
        )
    for step in job.steps(total):
        x = torch.randn(batch, 8)
        y = x.sum(dim=1, keepdim=True).sin()
        opt.zero_grad()
        nn.functional.mse_loss(forward(x), y).backward()
        opt.step()
        if rank == 0:
            (out / "step").write_text(f"{step + 1}\n")
        time.sleep(sleep_s)
