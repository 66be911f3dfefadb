"""A 2-rank FSDP job (gloo, CPU) saving sharded checkpoints, for tests/job/test_sharded*.py.

Usage (one process per rank; SLURM_PROCID / SLURM_NTASKS give rank and world size,
MASTER_ADDR / MASTER_PORT the rendezvous): fsdp_train.py OUT_DIR STEPS
The model is sharded across the ranks with FSDP2 (``fully_shard``), so no rank holds
the whole state: GavelJob(..., sharded=True) saves every rank's shard. Each rank logs
``start rank= restart= step= node=`` to OUT_DIR/log-<rank>; rank 0 writes a progress
line per step (OUT_DIR/step) and, at the end, the SHA-256 of the full (gathered) model
and optimizer state (OUT_DIR/final).
"""

import hashlib
import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from rank_steps import run_steps
from torch import nn
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict
from torch.distributed.fsdp import fully_shard

from slurm_gavel.job import GavelJob, exit_ranks

out, total = Path(sys.argv[1]), int(sys.argv[2])
rank, world = int(os.environ["SLURM_PROCID"]), int(os.environ["SLURM_NTASKS"])
torch.set_num_threads(1)
dist.init_process_group("gloo", init_method="env://", rank=rank, world_size=world)

torch.manual_seed(0)  # the same initial model on every rank, then each keeps its shard
model = nn.Sequential(nn.Linear(8, 32), nn.Tanh(), nn.Linear(32, 1))
for layer in (model[0], model[2]):
    fully_shard(layer)
fully_shard(model)
opt = torch.optim.Adam(model.parameters(), lr=0.01)
torch.manual_seed(1000 + rank)  # each rank its own data stream (restored per rank)

with GavelJob(model, opt, sharded=True) as job:
    sleep_s = float(os.environ.get("STEP_SLEEP", "0.1"))
    run_steps(job, model, opt, out, rank, total, batch=16, sleep_s=sleep_s)

full = StateDictOptions(full_state_dict=True, cpu_offload=True)
model_sd, opt_sd = get_state_dict(model, opt, options=full)  # a collective
if rank == 0:
    h = hashlib.sha256()
    for name, t in sorted(model_sd.items()):
        h.update(name.encode() + t.detach().contiguous().numpy().tobytes())
    for key, state in sorted(opt_sd["state"].items()):
        for k, v in sorted(state.items()):
            h.update(f"{key}.{k}".encode() + torch.as_tensor(v).contiguous().numpy().tobytes())
    (out / "final").write_text(h.hexdigest() + "\n")
exit_ranks(0)
