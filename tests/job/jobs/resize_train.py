"""A job resumed at another world size, for tests/job/test_world_resize*.py.

Usage (one process per rank; SLURM_PROCID / SLURM_NTASKS give rank and world size,
MASTER_ADDR / MASTER_PORT the rendezvous; SLURM_JOB_ID, SLURM_RESTART_COUNT and
GAVEL_CHECKPOINT_DIR as Slurm and the daemon set them):

    resize_train.py OUT_DIR MODE TOTAL STOPS KEEP

MODE ``ddp`` (rank 0 saves one file) or ``fsdp`` (FSDP2, every rank saves its shard;
a resume at another count reshards through torch.distributed.checkpoint). The job
declares a global batch of 16 and a micro batch of 4 (KEEP=1), or opts out with 2
accumulation steps (KEEP=0). Sample ``i`` of the data is fixed (a seeded table), and a
step reads the samples GavelJob's batch plan names, so the samples behind a step do not
depend on the world size. STOPS is a comma list of steps (0: none): after the first
one past the step it resumed at, every rank asks for the checkpoint and exits 99. At
the end the loss on a fixed evaluation set goes to OUT_DIR/final (``float.hex``); each
rank appends ``start`` and world-change lines to OUT_DIR/log-<rank>.
"""

import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn

from slurm_gavel.job import GavelJob, exit_ranks

out, mode, total, stops, keep = (
    Path(sys.argv[1]),
    sys.argv[2],
    int(sys.argv[3]),
    [int(s) for s in sys.argv[4].split(",")],
    sys.argv[5] == "1",
)
rank, world = int(os.environ["SLURM_PROCID"]), int(os.environ["SLURM_NTASKS"])
torch.set_num_threads(1)
dist.init_process_group("gloo", init_method="env://", rank=rank, world_size=world)

data = torch.Generator().manual_seed(7)
x_all = torch.randn(total * 16, 8, generator=data)
y_all = x_all.sum(dim=1, keepdim=True).sin()
x_eval = torch.randn(64, 8, generator=data)
y_eval = x_eval.sum(dim=1, keepdim=True).sin()

torch.manual_seed(0)  # the same initial model on every rank
model = nn.Sequential(nn.Linear(8, 32), nn.Tanh(), nn.Linear(32, 1))
if mode == "fsdp":
    from torch.distributed.fsdp import fully_shard

    for layer in (model[0], model[2]):
        fully_shard(layer)
    fully_shard(model)
    net = model
else:
    net = nn.parallel.DistributedDataParallel(model)
opt = torch.optim.Adam(model.parameters(), lr=0.01)


def note(line):
    with open(out / f"log-{rank}", "a") as log:
        print(line, file=log)


def changed(change):
    note(f"change {change.previous}->{change.current} step={change.step}")


batch = {"global_batch": 16, "micro_batch": 4} if keep else {"micro_batch": 4}
if not keep:
    batch.update(keep_global_batch=False, accumulation_steps=2)
with GavelJob(model, opt, sharded=mode == "fsdp", on_world_size_change=changed, **batch) as job:
    plan = job.batch
    node = os.environ.get("SLURMD_NODENAME", "-")
    note(
        f"start world={job.world_size} previous={job.previous_world_size} step={job.step} "
        f"accumulation={plan.accumulation_steps} global={plan.global_batch} node={node}"
    )
    stop = min([s for s in stops if s > job.step], default=0)
    for step in job.steps(total):
        opt.zero_grad()
        for sl in plan.micro_slices(step, rank):
            xb, yb = x_all[sl.start : sl.stop], y_all[sl.start : sl.stop]
            (nn.functional.mse_loss(net(xb), yb) * plan.loss_scale).backward()
        opt.step()
        if step + 1 == stop:
            job.request_checkpoint()

with torch.no_grad():
    loss = nn.functional.mse_loss(net(x_eval), y_eval).item()  # every rank (FSDP)
if rank == 0:
    (out / "final").write_text(float(loss).hex() + "\n")
exit_ranks(0)
