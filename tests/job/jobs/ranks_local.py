"""One rank of a 2-rank gloo job outside Slurm, for tests/job/test_ranks.py.

Usage: ranks_local.py RANK PORT CHECKPOINT_DIR RESTARTS [SIGNAL_RANK SIGNAL_STEP]
Only rank SIGNAL_RANK is "signalled" (request_checkpoint) after step SIGNAL_STEP.
Prints ``start STEP`` and ``done STEP`` (or exits with the requeue code).
"""

import os
import sys

import torch
import torch.distributed as dist

from slurm_gavel.job import GavelJob, exit_ranks

rank, port, ckdir, restarts = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
sig_rank, sig_step = (int(sys.argv[5]), int(sys.argv[6])) if len(sys.argv) > 6 else (-1, -1)
os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
torch.set_num_threads(1)
dist.init_process_group("gloo", rank=rank, world_size=2)
w = torch.zeros(3)
env = {"SLURM_JOB_ID": "77", "SLURM_RESTART_COUNT": restarts, "GAVEL_CHECKPOINT_DIR": ckdir}
with GavelJob(env=env, w=w) as job:
    print("start", job.step, flush=True)
    if job.restored("w") is not None:
        w = job.restored("w")
    for step in job.steps(20):
        w += 1
        job.objects["w"] = w
        if rank == sig_rank and step == sig_step:
            job.request_checkpoint()
print("done", job.step, w.tolist(), flush=True)
exit_ranks(0)
