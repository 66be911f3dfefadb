"""A 2-rank data-parallel job (gloo, CPU) under GavelJob, for tests/job/test_ranks_on_slurm.py.

Usage (one task per rank, from srun): ddp_train.py OUT_DIR STEPS
Each rank logs ``start rank= restart= step= node=`` to OUT_DIR/log-<rank>; rank 0
writes a progress line per step (OUT_DIR/step) and, at the end, the SHA-256 of the
model's and optimizer's bytes (OUT_DIR/final).
"""

import hashlib
import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from rank_steps import run_steps
from torch import nn

from slurm_gavel.job import GavelJob, exit_ranks

out, total = Path(sys.argv[1]), int(sys.argv[2])
rank, world = int(os.environ["SLURM_PROCID"]), int(os.environ["SLURM_NTASKS"])
torch.set_num_threads(1)
dist.init_process_group("gloo", init_method="env://", rank=rank, world_size=world)

torch.manual_seed(0)  # the same initial model on every rank
model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1))
ddp = nn.parallel.DistributedDataParallel(model)
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
torch.manual_seed(1000 + rank)  # each rank its own data stream (restored per rank)

with GavelJob(model, opt) as job:
    run_steps(job, ddp, opt, out, rank, total, batch=32, sleep_s=0.1)

if rank == 0:
    h = hashlib.sha256()
    for t in model.state_dict().values():
        h.update(t.detach().contiguous().numpy().tobytes())
    for s in opt.state_dict()["state"].values():
        h.update(s["momentum_buffer"].numpy().tobytes())
    (out / "final").write_text(h.hexdigest() + "\n")
exit_ranks(0)
