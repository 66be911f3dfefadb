"""Sharded (FSDP) training under slurm-gavel: every rank saves its own shard
(docs/frameworks/torchrun.md)."""

import os

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.fsdp import fully_shard

from slurm_gavel.job import GavelJob, exit_ranks

rank, world = int(os.environ["SLURM_PROCID"]), int(os.environ["SLURM_NTASKS"])
backend = "nccl" if torch.cuda.is_available() else "gloo"
if backend == "nccl":
    torch.cuda.set_device(int(os.environ["SLURM_LOCALID"]))
dist.init_process_group(backend, rank=rank, world_size=world)  # before GavelJob
device = torch.device("cuda") if backend == "nccl" else torch.device("cpu")

torch.manual_seed(0)  # the same initial model on every rank, then each keeps its shard
model = nn.Sequential(nn.Linear(32, 256), nn.ReLU(), nn.Linear(256, 10)).to(device)
for layer in (model[0], model[2]):
    fully_shard(layer)
fully_shard(model)  # each rank now holds 1/world of every parameter and its Adam state
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
torch.manual_seed(1000 + rank)  # each rank its own data (restored per rank on resume)

# sharded=True: every rank writes its shard (torch.distributed.checkpoint) into one
# directory per step; on resume every rank loads its part of the newest complete one.
with GavelJob(model, optimizer, sharded=True) as job:
    for step in job.steps(int(os.environ.get("GAVEL_TOTAL_STEPS", 100_000))):
        x = torch.randn(64, 32, device=device)
        loss = nn.functional.cross_entropy(model(x), x[:, :10].argmax(dim=1))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if rank == 0 and step % 1000 == 0:
            print(f"step {step} loss {loss.item():.4f}", flush=True)
exit_ranks(0)  # leave together, then exit without torch's teardown (see the guide)
