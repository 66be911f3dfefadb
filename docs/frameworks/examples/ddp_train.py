"""Data-parallel training on several nodes under slurm-gavel (docs/frameworks/torchrun.md)."""

import os

import torch
import torch.distributed as dist
from torch import nn

from slurm_gavel.job import GavelJob, exit_ranks

rank, world = int(os.environ["SLURM_PROCID"]), int(os.environ["SLURM_NTASKS"])
backend = "nccl" if torch.cuda.is_available() else "gloo"
if backend == "nccl":
    torch.cuda.set_device(int(os.environ["SLURM_LOCALID"]))
dist.init_process_group(backend, rank=rank, world_size=world)  # before GavelJob
device = torch.device("cuda") if backend == "nccl" else torch.device("cpu")

torch.manual_seed(0)  # the same initial model on every rank
model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 10)).to(device)
ddp = nn.parallel.DistributedDataParallel(model)
optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
torch.manual_seed(1000 + rank)  # each rank its own data (restored per rank on resume)

with GavelJob(model, optimizer) as job:  # every rank resumes from the same step
    for step in job.steps(int(os.environ.get("GAVEL_TOTAL_STEPS", 100_000))):
        x = torch.randn(64, 32, device=device)
        loss = nn.functional.cross_entropy(ddp(x), x[:, :10].argmax(dim=1))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if rank == 0 and step % 1000 == 0:
            print(f"step {step} loss {loss.item():.4f}", flush=True)
exit_ranks(0)  # leave together, then exit without torch's teardown (see the guide)
