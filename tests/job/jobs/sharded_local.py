"""One rank of a 2-rank gloo job saving sharded checkpoints, for tests/job/test_sharded.py.

Usage: sharded_local.py RANK PORT CHECKPOINT_DIR RESTARTS MODE
MODE ``save``: build a replicated (DDP-style) model, call ``checkpoint()`` before the
loop (at step 3) and print ``saved <path>``; ``load``: resume and print ``loaded
<step> <sha256 of the weights>``; ``plain``: as ``save`` without ``sharded``.
"""

import hashlib
import os
import sys

import torch
import torch.distributed as dist
from torch import nn

from slurm_gavel.job import GavelJob, exit_ranks

rank, port, ckdir, restarts, mode = sys.argv[1:6]
os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
torch.set_num_threads(1)
dist.init_process_group("gloo", rank=int(rank), world_size=2)
torch.manual_seed(0 if mode != "load" else 1)
model = nn.Linear(4, 3)
env = {"SLURM_JOB_ID": "8", "SLURM_RESTART_COUNT": restarts, "GAVEL_CHECKPOINT_DIR": ckdir}
job = GavelJob(model, env=env, sharded=mode != "plain")
if mode == "load":
    step = job.resume()
    h = hashlib.sha256(b"".join(t.numpy().tobytes() for t in model.state_dict().values()))
    print("loaded", step, h.hexdigest(), flush=True)
else:
    job.step = 3
    print("saved", job.checkpoint(), flush=True)
    h = hashlib.sha256(b"".join(t.numpy().tobytes() for t in model.state_dict().values()))
    print("weights", h.hexdigest(), flush=True)
exit_ranks(0)
